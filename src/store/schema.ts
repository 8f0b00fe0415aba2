import type { Generated } from 'kysely';

/** Table types for today's schema. Migrations never import these (they are frozen in time). */
export interface BucketsTable {
  name: string;
  destination: string | null;
  max_body: number;
  ack_status: number;
  ack_body: string | null;
  ack_content_type: string | null;
  paused: number;
  created_at: number;
  updated_at: number;
}

export interface RequestsTable {
  id: string;
  bucket: string;
  received_at: number;
  method: string;
  /** Raw sub-path after the bucket name, still percent-encoded; '' when none. */
  path: string;
  /** Raw query string without the '?'; null when the target had no '?'. */
  query: string | null;
  /** JSON of the flat raw header list [name, value, name, value, …] as received. */
  headers: string;
  body: Buffer;
  size: number;
  sha256: string;
  peer: string | null;
}

export type DeliveryState =
  | 'pending'
  | 'retrying'
  | 'delivering'
  | 'delivered'
  | 'failed'
  | 'exhausted'
  | 'superseded';

export interface DeliveriesTable {
  id: string;
  request_id: string;
  bucket: string;
  /** null: follows the bucket's current destination; set for replays to another URL. */
  destination: string | null;
  generation: number;
  state: DeliveryState;
  attempts: number;
  next_attempt_at: number;
  lease_until: number | null;
  trigger: 'initial' | 'replay';
  replay_id: string | null;
  deferrals: number;
  last_deferral_reason: string | null;
  created_at: number;
  updated_at: number;
}

export interface RejectionsTable {
  /** '' for refusals that name no existing bucket (unknown bucket, parse errors). */
  bucket: string;
  reason: string;
  count: number;
  last_at: number;
}

export interface MetaTable {
  key: string;
  value: Generated<number>;
}

export interface Database {
  buckets: BucketsTable;
  requests: RequestsTable;
  deliveries: DeliveriesTable;
  rejections: RejectionsTable;
  meta: MetaTable;
}
