import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { T0, type Ctx } from './harness.js';

export function settingsContract(ctx: Ctx): void {
  describe('settings', () => {
    it('none set at first; put inserts, then replaces, stamped with the clock; every connection and the drain store read the same', async () => {
      const { store, drain } = ctx.set;
      assert.deepEqual(await store.getSettings(), []);
      assert.deepEqual(await drain.getSettings(), []);
      assert.deepEqual(await store.putSetting('destinations', 'public'), { key: 'destinations', value: 'public', updatedAt: T0 });
      ctx.clock.advance(1500);
      const other = await ctx.set.another();
      assert.deepEqual(await other.putSetting('destinations', 'allow:10.0.0.0/8,consumer.internal'), {
        key: 'destinations',
        value: 'allow:10.0.0.0/8,consumer.internal',
        updatedAt: T0 + 1500,
      });
      await store.putSetting('another_key', 'x');
      const want = [
        { key: 'another_key', value: 'x', updatedAt: T0 + 1500 },
        { key: 'destinations', value: 'allow:10.0.0.0/8,consumer.internal', updatedAt: T0 + 1500 },
      ];
      assert.deepEqual(await store.getSettings(), want);
      assert.deepEqual(await drain.getSettings(), want);
      assert.deepEqual(await (await ctx.set.anotherDrain()).getSettings(), want);
    });
  });
}
