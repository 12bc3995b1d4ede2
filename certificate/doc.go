// Package certificate is what a canary run concludes: the tool and target
// that ran, when, with which tenants, every scenario's report, the verdict,
// and (once a self-test ran) the harness's detection power. It renders as
// JSON (the record), JUnit XML (for CI test views) and a short Markdown
// summary (for people, and for $GITHUB_STEP_SUMMARY).
//
//	c := certificate.New(certificate.Target{Name: "agentd", Version: "0.1"}, tenants, reports, elapsed)
//	if err := c.Write("canary-out", os.LookupEnv); err != nil { ... }
//	os.Exit(certificate.ExitCode(c.Verdict))
//
// The verdict is "certified" (exit 0) only when at least one scenario ran
// and every scenario that ran passed; "leaks" (exit 1) when any scenario
// found a canary of one tenant in another's place; "failed" (exit 2) when
// the harness or the target failed (not ready, crashed, a positive control
// or a liveness check failed) and no leak was found. A leak outranks a
// failure: a canary found in a foreign place is proof on its own, whatever
// else went wrong.
package certificate
