import { uuidv7 } from 'uuidv7';

/**
 * Time-sortable ids (UUIDv7, RFC 9562). Sorting by id sorts by creation time, and new rows append
 * to the primary-key B-tree instead of splitting random pages.
 */
export function newId(): string {
  return uuidv7();
}
