// A job that must run on one node at a time: node nightly-report.mjs (SCHEDLOCK_URL, SCHEDLOCK_TOKEN from the
// environment). Every node may start it; the one that takes the lock sends the report, the others skip.
import { assertLocked, withLock } from './schedlock.mjs';

async function sendReport() {
  const lease = assertLocked();
  console.log(`sending the report, fencing token ${lease.fencingToken}`);
  return 'sent';
}

const run = await withLock('nightly-report', { lockAtMostFor: '14m', lockAtLeastFor: '5m' }, sendReport);
console.log(run.executed ? `report ${run.result}` : `skipped: ${run.reason}`);
process.exitCode = run.executed || run.reason === 'held' ? 0 : 69;
