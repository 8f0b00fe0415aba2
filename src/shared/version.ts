import { readFileSync } from 'node:fs';

/**
 * hookbucket's version, read once from package.json: the one place it is written. From the
 * compiled dist/src/shared/ the package root is three folders up; an installed package
 * ships package.json beside dist/.
 */
export const VERSION: string = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;
