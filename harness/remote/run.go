package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// ErrNoCommand is Run's error for a command the remote: block does not
// give.
var ErrNoCommand = errors.New("the target file's remote: block gives no command for it")

// waitDelay is how long a killed command's pipes may stay open (a
// grandchild holding them) before Run returns anyway.
const waitDelay = 5 * time.Second

// Run runs one operator command to its end, in a process group of its own
// that ctx's end kills whole: argv with {path} filled with path, stdin
// from in (nil: none), stdout to out (nil: kept and returned). It runs
// with the harness's own environment: the operator's transport (an ssh
// agent, a kubeconfig) is there. A non-zero exit is an error naming the
// field, the command and the end of its stderr.
func Run(ctx context.Context, field string, argv []string, path string, in io.Reader, out io.Writer) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("%s: %w", field, ErrNoCommand)
	}
	argv = placeholder.Strings(argv, map[string]string{"path": path})
	cmd := procgroup.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	cmd.Stdin = in
	cmd.WaitDelay = waitDelay
	var stdout, stderr syncio.Buffer
	cmd.Stdout = &stdout
	if out != nil {
		cmd.Stdout = out
	}
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return stdout.String(), fmt.Errorf("%s (%s): %w%s", field, strings.Join(argv, " "), err, tail("stderr", stderr.String()))
	}
	return stdout.String(), nil
}

// tail is the last lines of a command's stream s, for an error.
func tail(name, s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\n" + name + ":\n" + strings.Join(lines, "\n")
}
