// Command canary-run certifies that a pooled multi-tenant agent server leaks
// no tenant's data to another. With no arguments it runs the whole scenario
// catalog against the embedded agentd (nothing to install) and writes the
// certificate:
//
//	canary-run                          # 3 tenants, every scenario, into ./canary-out
//	canary-run --tenants 32 --run pooled --out /tmp/cert
//	canary-run --target staging.yaml    # any other server, described in YAML
//
// The certificate is certificate.json, junit.xml and summary.md in --out
// (summary.md is also appended to $GITHUB_STEP_SUMMARY when set). The exit
// code is 0 when certified, 1 when a leak was found, 2 on a usage error or
// when the harness or the target failed.
//
// `canary-run --help` prints every command (merge, scan, fakellm, target
// check, agentd, version) and the run's flags; each command takes --help
// for its own. The run is a thin layer on package certify, which a Go
// test calls directly (certify.Run); the embedded agentd is this binary
// re-executed through certify.Command.
package main
