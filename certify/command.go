package certify

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tenantcanary/tenantcanary/internal/proc"
)

// CommandEnv is the environment variable that names, in a program
// re-executed by Command, the command it runs (see Dispatch). A program
// run with it set never does its own work: it runs that command, or exits
// 2 when it has none of that name.
const CommandEnv = "TENANTCANARY_COMMAND"

// envProgram sets CommandEnv for the program Command re-executes: an argv
// carries no environment of its own, and each argv of a target may name a
// different command.
const envProgram = "/usr/bin/env"

// Command is the argv that runs this program again as command name with
// args: for a harness.Target's Stdio, Serve, Gateway, ProfileRoot,
// CronTick or Preflight. It sets CommandEnv=name (with env(1)) and runs
// this executable with args; the re-executed program's Dispatch (or Main,
// in a test binary) runs commands[name] in place of main (or the tests).
// The variable stays set in the command's own children, so a server that
// re-executes itself (os.Executable) runs as the same command again.
//
//	target.Serve = certify.Command("myserver", "serve", "--port", "{port}")
func Command(name string, args ...string) []string {
	exe, err := os.Executable()
	if err != nil {
		exe, _ = filepath.Abs(os.Args[0])
	}
	return append([]string{envProgram, CommandEnv + "=" + name, exe}, args...)
}

// Dispatch runs the command CommandEnv names, when it is set, and exits
// with the status it returns; otherwise it returns at once. Call it first
// in main (canary-run does, for its embedded agentd):
//
//	func main() {
//		certify.Dispatch(map[string]func() int{"myserver": server.Main})
//		...
//	}
//
// A command reads its arguments from os.Args[1:], as a main does. A name
// that is not in commands exits 2 with a message naming the ones that are:
// a re-executed program never falls through to its own work.
func Dispatch(commands map[string]func() int) {
	name, ok := os.LookupEnv(CommandEnv)
	if !ok {
		return
	}
	os.Exit(dispatch(name, commands, os.Stderr))
}

func dispatch(name string, commands map[string]func() int, stderr io.Writer) int {
	main := commands[name]
	if main == nil {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		slices.Sort(names)
		fmt.Fprintf(stderr, "certify: %s=%q names no command of this program (it has: %s); unset it to run the program itself\n",
			CommandEnv, name, strings.Join(names, ", "))
		return 2
	}
	return main()
}

// Main is the body of a TestMain whose test binary certifies a server by
// re-executing itself as that server (Command): run as a command it runs
// that command and exits, never the tests; otherwise it runs the tests.
// The servers it starts exit at once under the race detector (GORACE gains
// atexit_sleep_ms=0: a race-built process otherwise sleeps a second at its
// exit, and a server's stop waits on every process it started).
//
//	func TestMain(m *testing.M) {
//		os.Exit(certify.Main(m, map[string]func() int{"myserver": server.Main}))
//	}
func Main(m *testing.M, commands map[string]func() int) int {
	Dispatch(commands)
	proc.QuickRaceExitForChildren()
	return m.Run()
}
