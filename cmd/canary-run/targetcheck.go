package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
)

const targetUsage = `usage: canary-run target check [--keep] [--wait D] FILE
  validate the target file FILE and make one dry pass with two tenants:
  sandbox, start, ready line, health check, connect, a session per tenant,
  one turn each, stop; each step prints ok, or FAIL with what did not match
  (a method the server answered -32601, an event that never came, a ready
  line that never matched, with the last lines seen); --wait bounds each
  step's wait for the target (default 90s), --keep keeps the sandbox

exit: 0 the pass got through, 1 it got through and the server leaked on the
  way (warn lines: a session reporting another tenant's model, a turn whose
  provider got another tenant's key), 2 the file is invalid or a step failed`

// runTarget is `canary-run target ...`.
func runTarget(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(stdout, targetUsage)
		return 0
	}
	if len(args) == 0 || args[0] != "check" {
		return usageError(stderr, "canary-run target", errors.New("want the subcommand check"), targetUsage)
	}
	fs := flag.NewFlagSet("canary-run target check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	keep := fs.Bool("keep", false, "keep the sandbox (its logs) after the pass")
	wait := fs.Duration("wait", 90*time.Second, "how long each step waits for the target")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, targetUsage)
			return 0
		}
		return usageError(stderr, "canary-run target check", err, targetUsage)
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "canary-run target check", fmt.Errorf("want one target file, got %d arguments", fs.NArg()), targetUsage)
	}
	target, err := harness.LoadTarget(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stdout, "FAIL  %-18s %v\n", "target file", err)
		return exitUsage
	}
	work, err := os.MkdirTemp("", "canary-target-check-")
	if err != nil {
		fmt.Fprintf(stderr, "canary-run target check: %v\n", err)
		return exitUsage
	}
	if *keep {
		fmt.Fprintf(stdout, "sandbox kept in %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	dry := harness.DryPass
	if target.IsGateway() {
		dry = llmgw.DryPass
	}
	if err := dry(ctx, target, work, stdout, *wait); err != nil {
		if errors.Is(err, harness.ErrDryPassLeaked) {
			fmt.Fprintf(stdout, "target %s: the dry pass got through; the server leaked on the way (warn): run the catalog for the findings\n", target.Name)
			return certificate.ExitLeaks
		}
		fmt.Fprintf(stderr, "canary-run target check: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "target %s: the dry pass got through\n", target.Name)
	return 0
}
