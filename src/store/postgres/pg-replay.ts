// Placeholder until w/pgops is merged (the coordinator takes that branch's file): same exports.
import type { Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { NewReplay, Replay, ReplayProgress } from '../store.js';

export async function pgCreateReplay(_db: Kysely<Database>, _input: NewReplay): Promise<Replay> {
  throw new Error('not merged yet');
}

export async function pgGetReplay(_db: Kysely<Database>, _id: string): Promise<Replay | undefined> {
  throw new Error('not merged yet');
}

export async function pgListReplays(_db: Kysely<Database>, _options: { bucket?: string; limit: number }): Promise<Replay[]> {
  throw new Error('not merged yet');
}

export async function pgReplayProgress(_db: Kysely<Database>, _id: string): Promise<ReplayProgress> {
  throw new Error('not merged yet');
}
