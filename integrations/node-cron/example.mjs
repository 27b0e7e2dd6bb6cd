// @ts-check
// A node-cron scheduler whose task runs once per tick across every node that runs this file, with schedlock.
// The suite runs it as several processes against a live server (tests/system/integrations/test_node_cron_gocron.py);
// the knobs in the environment are for that: JOB_NAME, SCHEDULE (six fields: seconds too), LEASE_MS,
// JOB=ok|fail|hang, FAIL_OPEN.
// Each thing it does is one JSON line on stdout.

import cron from 'node-cron';
import { SchedlockCoordinator } from 'schedlock-node-cron';

const env = process.env;
const print = (/** @type {object} */ event) => console.log(JSON.stringify({ pid: process.pid, ...event }));

/** The job: says which tick it runs, then does what JOB says. @param {import('node-cron').TaskContext} context */
async function sendReport(context) {
  print({ event: 'started', tick: context.date.toISOString() });
  if (env.JOB === 'fail') throw new Error('the report service is down');
  if (env.JOB === 'hang') await new Promise(() => {}); // never ends: the holder is killed
  print({ event: 'finished', tick: context.date.toISOString() });
}

// SCHEDLOCK_URL and SCHEDLOCK_TOKEN come from the environment.
const coordinator = new SchedlockCoordinator({ failOpen: env.FAIL_OPEN === '1' });

const task = cron.schedule(env.SCHEDULE ?? '0 3 * * *', coordinator.job(sendReport), {
  name: env.JOB_NAME ?? 'nightly-report', // the lock's name; each tick is a slot of it
  distributed: true,
  runCoordinator: coordinator,
  distributedLease: Number(env.LEASE_MS ?? 600_000), // lock_at_most_for: a dead holder blocks no longer than this
});
task.on('execution:skipped', ({ date, reason }) => print({ event: 'skipped', tick: date.toISOString(), reason }));
task.on('execution:failed', ({ date }) => print({ event: 'failed', tick: date.toISOString() }));
task.on('execution:missed', ({ date }) => print({ event: 'missed', tick: date.toISOString() }));

print({ event: 'ready' });
process.on('SIGTERM', () => task.destroy());
