import { UUID, uuidv7 } from 'uuidv7';

/**
 * Time-sortable ids (UUIDv7, RFC 9562). Sorting by id sorts by creation time, and new rows append
 * to the primary-key B-tree instead of splitting random pages.
 */
export function newId(): string {
  return uuidv7();
}

/**
 * The smallest id made at `ms` (epoch ms): every id made at or after `ms` sorts at or above it, so
 * `id >= idFloorAt(t)` bounds an index range to the rows made since t.
 */
export function idFloorAt(ms: number): string {
  return UUID.fromFieldsV7(Math.max(0, Math.floor(ms)), 0, 0, 0).toString();
}

/** The epoch ms an id was made at: a UUIDv7 starts with 48 bits of it. */
export function idTimeMs(id: string): number {
  return parseInt(id.replace(/-/g, '').slice(0, 12), 16);
}
