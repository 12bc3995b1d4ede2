// Command provision provisions tenantcanary's tenants in a running one-api
// (the gateway target's provisioner): it reads the tenants' roster
// (tenants.json of `canary-run fakellm`, or what the harness pipes) on
// stdin, or from the file $ROSTER when stdin is a terminal, makes each
// tenant's group, user, channel and token through the management API with
// the root's access token, and prints on stdout
//
//	{"tenants": {"alpha": {"key": "...", "models": ["model-alpha-..."], "base_path": "/v1",
//	  "headers": {"Authorization": "<the user's access token>"},
//	  "ids": {"user": "2", "token": "3", "channel": "1", "group": "tc-alpha"}}}}
//
// With the argument deprovision it offboards one tenant instead (the
// target's llm_gateway.deprovision): it reads the harness's request on
// stdin,
//
//	{"step": "disable"|"delete", "tenant": "alpha", "access": {"ids": {"user": "2", "channel": "1", ...}, ...}}
//
// and disables the tenant's user, or deletes its user and its channel,
// through the admin API (POST /api/user/manage, DELETE /api/channel/ID).
// It prints nothing.
//
// With RETRIES=1 in its environment (the harness sets it for
// gateway-failover) it also turns on one-api's retries (the option
// RetryTimes, read back) and gives each tenant a fallback channel of its
// group (ids.fallback_channel), so a failed relay is retried as a
// deployment with retries would.
//
// Environment: GATEWAY_URL (http://127.0.0.1:PORT: one-api binds every
// interface, reach it on loopback) and ROOT_TOKEN (one-api's
// INITIAL_ROOT_ACCESS_TOKEN).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tenantcanary/tenantcanary/examples/targets/one-api/oneapi"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "one-api provision:", err)
		os.Exit(2)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fl := flag.NewFlagSet("provision", flag.ContinueOnError)
	timeout := fl.Duration("timeout", 2*time.Minute, "give up after this long")
	waitRelay := fl.Bool("wait-relay", false, "after provisioning, wait until the relay serves every tenant (one-api with a Redis reloads its channels only every SYNC_FREQUENCY seconds)")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "usage: GATEWAY_URL=http://127.0.0.1:PORT ROOT_TOKEN=T provision [--timeout D] [--wait-relay] < tenants.json\n"+
			"       GATEWAY_URL=http://127.0.0.1:PORT ROOT_TOKEN=T provision [--timeout D] deprovision < request.json")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return err
	}
	deprovision := fl.NArg() == 1 && fl.Arg(0) == "deprovision"
	if fl.NArg() > 0 && !deprovision {
		fl.Usage()
		return fmt.Errorf("unexpected argument %q (want none, or deprovision)", fl.Arg(0))
	}
	url, token := os.Getenv("GATEWAY_URL"), os.Getenv("ROOT_TOKEN")
	if url == "" || token == "" {
		return errors.New("set GATEWAY_URL (one-api's base URL) and ROOT_TOKEN (its INITIAL_ROOT_ACCESS_TOKEN)")
	}
	if deprovision {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("read the deprovision request from stdin: %w", err)
		}
		req, err := oneapi.DecodeDeprovision("stdin", data)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		return oneapi.Deprovision(ctx, oneapi.NewClient(url, token), req)
	}
	where, data, err := readRoster(stdin)
	if err != nil {
		return err
	}
	r, err := oneapi.DecodeRoster(where, data)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	opts, err := retryOptions(os.Getenv("RETRIES"))
	if err != nil {
		return err
	}
	c := oneapi.NewClient(url, token)
	out, err := oneapi.ProvisionWith(ctx, c, r, opts)
	if err != nil {
		return err
	}
	if *waitRelay {
		start := time.Now()
		for name, a := range out.Tenants {
			if err := oneapi.WaitRelay(ctx, c, a, 250*time.Millisecond); err != nil {
				return fmt.Errorf("tenant %s: %w", name, err)
			}
		}
		fmt.Fprintf(os.Stderr, "one-api provision: the relay served every tenant after %s\n", time.Since(start).Round(time.Millisecond))
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// retryOptions reads RETRIES, which the harness sets to 1 when a scenario
// wants the gateway's own retries and fallbacks (gateway-failover): one-api's
// RetryTimes and a fallback channel per tenant.
func retryOptions(v string) (oneapi.Options, error) {
	switch v {
	case "", "0":
		return oneapi.Options{}, nil
	case "1":
		return oneapi.Options{RetryTimes: oneapi.DefaultRetryTimes}, nil
	}
	return oneapi.Options{}, fmt.Errorf("RETRIES=%q: want 1 (turn on one-api's retries and a fallback channel per tenant), 0 or nothing", v)
}

// readRoster reads the roster from stdin, or from $ROSTER when stdin is a
// terminal or empty.
func readRoster(stdin io.Reader) (string, []byte, error) {
	if f, ok := stdin.(*os.File); !ok || !isTerminal(f) {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return "", nil, fmt.Errorf("read roster from stdin: %w", err)
		}
		if len(data) > 0 {
			return "stdin", data, nil
		}
	}
	path := os.Getenv("ROSTER")
	if path == "" {
		return "", nil, errors.New("no roster: pipe it on stdin or set ROSTER to its file")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("read roster: %w", err)
	}
	return path, data, nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
