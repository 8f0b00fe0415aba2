/** Polls `check` every 20 ms until it holds; fails with `what` after `ms` (a bound that catches hangs, not a timing assertion). */
export async function until(check: () => Promise<boolean> | boolean, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
