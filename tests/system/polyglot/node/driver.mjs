// Drives examples/node/schedlock.mjs for tests/system/polyglot: each scenario prints one JSON object on stdout.
//   node driver.mjs cycle NAME
//   node driver.mjs execute NAME AT_MOST_MS AT_LEAST_MS ok|throw
//   node driver.mjs tick NAME ok|throw slot KEY  |  node driver.mjs tick NAME ok|throw once-per CRON ZONE
import { assertLocked, RequestRejectedError, SchedLock, withLock } from '../../../../examples/node/schedlock.mjs';

async function cycle(name) {
  const client = new SchedLock();
  const lease = await client.tryLock(name, { lockAtMostFor: '10m' });
  const firstUntil = lease.lockUntil;
  const second = (await client.tryLock(name, { lockAtMostFor: '10m' })) === null ? 'held' : 'acquired';
  await lease.extend('20m');
  const extendedUntil = lease.lockUntil;
  await lease.release();
  const row = await client.get(name);
  const listed = (await client.list(name)).map((lock) => lock.name);
  return {
    fencing_token: lease.fencingToken, first_lock_until: firstUntil, second, extended: true,
    extended_lock_until: extendedUntil, get_held: row.held, get_fencing_token: row.fencing_token, listed,
  };
}

async function execute(name, atMostMs, atLeastMs, mode) {
  const result = { fencing_token: null };
  try {
    const run = await withLock(name, { lockAtMostFor: Number(atMostMs), lockAtLeastFor: Number(atLeastMs) }, async () => {
      result.fencing_token = assertLocked().fencingToken;
      if (mode === 'throw') throw new Error('the job failed');
    });
    result.outcome = run.executed ? 'executed' : `skipped_${run.reason}`;
  } catch (error) {
    if (error instanceof RequestRejectedError) return { outcome: 'rejected', status: error.status, code: error.code };
    result.outcome = 'threw';
  }
  try {
    assertLocked();
    result.assert_outside = 'allowed';
  } catch {
    result.assert_outside = 'refused';
  }
  return result;
}

async function tick(name, mode, kind, value, zone) {
  const options = kind === 'slot' ? { slot: value } : { oncePer: value, oncePerTimezone: zone };
  const result = { slot: null };
  try {
    const run = await withLock(name, { lockAtMostFor: '1m', ...options }, async (lease) => {
      result.slot = lease.slot;
      if (mode === 'throw') throw new Error('the job failed');
    });
    result.outcome = run.executed ? 'executed' : `skipped_${run.reason}`;
  } catch {
    result.outcome = 'threw';
  }
  return result;
}

const [scenario, name, ...rest] = process.argv.slice(2);
const scenarios = { cycle: () => cycle(name), execute: () => execute(name, ...rest), tick: () => tick(name, ...rest) };
const result = await scenarios[scenario]();
console.log(JSON.stringify(result));
