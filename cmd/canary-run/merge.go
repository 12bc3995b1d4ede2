package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/certificate"
)

const mergeUsage = "usage: canary-run merge [--out DIR] SHARD-DIR..."

func mergeFlags() (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("canary-run merge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "canary-out", "write the merged certificate into this `DIR`")
	return fs, out
}

// runMerge is `canary-run merge`: the certificates the shards of one run
// wrote (canary-run --shard K/N --out SHARD-DIR), joined into the
// certificate of the whole run, with its verdict and exit code.
func runMerge(_ context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	const cmd = "canary-run merge"
	fs, out := mergeFlags()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(stdout, mergeUsage, "Join the certificates of the shards of one run into one: the worst verdict,\nthe scenarios in catalog order, the detection power of the shard that measured it.", fs)
			return 0
		}
		return usageError(stderr, cmd, err, mergeUsage)
	}
	if fs.NArg() == 0 {
		return usageError(stderr, cmd, errors.New("give the folders the shards wrote their certificates into"), mergeUsage)
	}
	if *out == "" {
		return usageError(stderr, cmd, errors.New("--out is empty"), mergeUsage)
	}
	var certs []*certificate.Certificate
	for _, dir := range fs.Args() {
		path := filepath.Join(dir, certificate.JSONFile)
		f, err := os.Open(path)
		if err != nil {
			return usageError(stderr, cmd, fmt.Errorf("read shard certificate: %w", err), mergeUsage)
		}
		c, err := certificate.ReadJSON(f)
		f.Close()
		if err != nil {
			return usageError(stderr, cmd, fmt.Errorf("%s: %w", path, err), mergeUsage)
		}
		certs = append(certs, c)
	}
	merged, err := certificate.Merge(certs)
	if err != nil {
		return usageError(stderr, cmd, err, mergeUsage)
	}
	if err := merged.WriteTable(stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
	}
	if err := merged.Write(*out, lookupEnv); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return certificate.ExitFailed
	}
	fmt.Fprintf(stdout, "certificate: %s\n", filepath.Join(*out, certificate.JSONFile))
	return certificate.ExitCode(merged.Verdict)
}
