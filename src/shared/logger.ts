import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return destination ? pino({ level, base: { svc: 'hookbucket' } }, destination) : pino({ level, base: { svc: 'hookbucket' } });
}

/** A logger that drops everything, for tests and CLI commands that print their own output. */
export const silentLogger: Logger = pino({ level: 'silent' });
