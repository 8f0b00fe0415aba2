/** The value parsers moved to src/options/ (shared with the admin API); the CLI's commands import them from here. */
export * from '../options/parsers.js';
