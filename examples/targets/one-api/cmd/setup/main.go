// Command setup readies one-api to start offline: one-api's token counter
// (github.com/pkoukk/tiktoken-go) downloads its BPE files from
// openaipublic.blob.core.windows.net at start unless it finds them in
// $TIKTOKEN_CACHE_DIR under the SHA-1 hex of the download URL. setup writes
// them there from github.com/pkoukk/tiktoken-go-loader, whose module embeds
// the same files, so nothing is fetched at run time.
//
//	setup [--tiktoken-dir DIR] [--node N] [-- COMMAND ARGS...]
//
// DIR defaults to $TIKTOKEN_CACHE_DIR. --node N is the node's number in a
// cluster (a target's {replica}): node 1 is one-api's master node, every
// other runs with NODE_TYPE=slave (one-api's own switch: a slave neither
// migrates the database nor runs the master's jobs, and syncs its caches
// from it). When $SQLITE_PATH is set, setup also
// makes the database's folder (one-api opens the file but makes no folder
// for it). With a command after "--", setup then replaces itself with it
// (exec, same pid), so a target file can start one-api through it:
//
//	gateway: [one-api-setup, --, one-api, --port, "{port}"]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/tenantcanary/tenantcanary/examples/targets/one-api/oneapi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "one-api setup:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("setup", flag.ContinueOnError)
	dir := fl.String("tiktoken-dir", os.Getenv("TIKTOKEN_CACHE_DIR"), "where one-api looks for its BPE files (default $TIKTOKEN_CACHE_DIR)")
	node := fl.Int("node", 1, "the node's number in a cluster: 1 is the master, any other a slave (NODE_TYPE=slave)")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "usage: setup [--tiktoken-dir DIR] [--node N] [-- COMMAND ARGS...]")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *node < 1 {
		return fmt.Errorf("--node %d: want 1 (the master) or more", *node)
	}
	if *dir == "" {
		return errors.New("no folder: give --tiktoken-dir or set TIKTOKEN_CACHE_DIR (one-api reads the same variable)")
	}
	n, err := oneapi.WriteTiktokenCache(*dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "one-api setup: %d BPE files in %s\n", n, *dir)
	if db := os.Getenv("SQLITE_PATH"); db != "" {
		if err := os.MkdirAll(filepath.Dir(db), 0o755); err != nil {
			return fmt.Errorf("the folder of SQLITE_PATH: %w", err)
		}
	}
	if fl.NArg() == 0 {
		return nil
	}
	argv := fl.Args()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	env := os.Environ()
	if *node > 1 {
		// One NODE_TYPE: a program reading its environment may take the
		// first of two (Go's does).
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_TYPE=") })
		env = append(env, "NODE_TYPE=slave")
	}
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}
