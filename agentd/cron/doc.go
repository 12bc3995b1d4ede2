// Package cron keeps a profile's scheduled jobs in cron/jobs.json and fires
// the due ones, each as a turn in its own profile's scope, writing the
// answer to cron/output/<id>/<timestamp>.md.
//
// Schedules are "every <duration>" ("every 1h", "every 90s"). A job is
// claimed (its next run moved on) under a file lock before it runs, so two
// tickers never fire it twice.
//
//	jobs := cron.ForProfile(p)                     // its files through p.FS(): no link followed
//	j, err := jobs.Create("nightly", "summarise the day", "every 24h", time.Now())
//	_, err = jobs.Trigger(j.ID, time.Now())        // due now
//	results := cron.Tick(ctx, profiles, time.Now(), runner)
package cron
