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
// Subcommands:
//
//	canary-run merge [--out DIR] SHARD-DIR...
//	canary-run scan --canaries FILE [--json] PATH...
//	canary-run fakellm --listen ADDR --tenants FILE [--out DIR] [--journal FILE] [--advertise-host H] [--homes DIR [--layout agentd|FILE]]
//	canary-run target check [--keep] [--wait D] FILE
//	canary-run agentd ARGS...
//
// merge joins the certificates of the shards of one run (canary-run
// --shard K/N runs every Nth scenario from the Kth); scan looks for
// canaries in files (for staging hosts the harness cannot read); fakellm
// serves one fake provider per tenant for a staging server, journaling
// every request, and with --homes writes the tenants' homes for it; target
// check validates a target file and makes one dry pass with it, diagnosing
// each step; agentd
// runs the embedded reference server, which is how the default target
// needs no install.
//
// Every command takes --help and --version. Results (the verdict table,
// findings, the certificate's path) go to stdout, progress to stderr.
package main
