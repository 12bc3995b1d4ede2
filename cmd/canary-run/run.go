package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/cli"
	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/invariants/scancmd"
)

// exitUsage is the exit code of a usage error (the same as a failed run's).
const exitUsage = certificate.ExitFailed

// usageText is canary-run's usage: the one source of it (doc.go points at
// --help, which prints it).
var usageText = `usage:
  ` + runSynopsis + `
      run the scenario catalog against a pooled server and write the
      certificate (certificate.json, junit.xml, summary.md) into --out
  ` + synopsis(mergeUsage) + `
      join the certificates of the shards of one run (--shard K/N) into one
  ` + synopsis(scancmd.Usage) + `
      look for canaries in files and trees, in every encoding
  ` + synopsis(fakellmUsage) + `
      serve one fake provider per tenant for a staging server until interrupted
  ` + synopsis(targetUsage) + `
      validate a target file and make one dry pass, step by step
  canary-run agentd ARGS...
      run the embedded agentd (the default target)
  canary-run version | --version

Results (the verdict table, findings) go to stdout, progress to stderr.
Every command takes --help.

exit: 0 certified (scan: nothing found), 1 leaks found, 2 a usage error
      or the harness or the target failed
`

// synopsis is the first line of a command's usage, without "usage: ".
func synopsis(usage string) string {
	first, _, _ := strings.Cut(usage, "\n")
	return strings.TrimPrefix(first, "usage: ")
}

// run is canary-run with args (without the program name); it returns the
// exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return dispatch(ctx, args, stdin, stdout, stderr, os.LookupEnv)
}

// dispatch is run with the environment lookup ($GITHUB_STEP_SUMMARY) as a
// parameter, so tests leave the real one alone.
func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	if len(args) > 0 && args[0] == "agentd" {
		// agentd answers its own --help and --version.
		return cli.Main(ctx, append([]string{"agentd"}, args[1:]...), stdin, stdout, stderr)
	}
	if askedVersion(args) {
		printVersion(stdout)
		return 0
	}
	if len(args) > 0 {
		switch args[0] {
		case "merge":
			return runMerge(ctx, args[1:], stdout, stderr, lookupEnv)
		case "scan":
			return scancmd.Run(ctx, args[1:], stdout, stderr)
		case "fakellm":
			return runFakeLLM(ctx, args[1:], stdout, stderr)
		case "target":
			return runTarget(ctx, args[1:], stdout, stderr)
		case "help", "-h", "-help", "--help":
			printHelp(stdout)
			return 0
		case "version":
			printVersion(stdout)
			return 0
		}
		if !strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "canary-run: unknown command %q (commands: merge, scan, fakellm, agentd, version; or flags for a run)\n%s", args[0], usageText)
			return exitUsage
		}
	}
	return runCertify(ctx, args, stdout, stderr, lookupEnv)
}

// usageError prints err and the usage, and returns the usage exit code.
func usageError(stderr io.Writer, cmd string, err error, usage string) int {
	fmt.Fprintf(stderr, "%s: %v\n%s\n", cmd, err, usage)
	return exitUsage
}

// printHelp prints the usage and the run's flags with their defaults.
func printHelp(w io.Writer) {
	fmt.Fprint(w, usageText)
	fmt.Fprintln(w, "\nflags of a run:")
	fs, _ := certifyFlags()
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// askedVersion: --version anywhere before a "--", for any command but
// agentd (which answers it itself).
func askedVersion(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version":
			return true
		}
	}
	return false
}

// printVersion prints this build's version and commit, saying where the
// commit came from (or that it is unknown).
func printVersion(w io.Writer) {
	fmt.Fprintln(w, certificate.ToolName+" canary-run "+certificate.ToolVersion())
}

// printCommandHelp prints a subcommand's usage, what it does, and its
// flags with their defaults.
func printCommandHelp(w io.Writer, usage, about string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n%s\n\nflags:\n", usage, about)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
