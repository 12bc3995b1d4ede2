package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// ErrPreflight is a target that says it cannot be certified on this
// machine: its preflight command failed (the embedded agentd's: no tool
// sandbox works here).
var ErrPreflight = errors.New("the target's preflight check failed: it cannot be certified here")

// preflightWait bounds a preflight command.
const preflightWait = 2 * time.Minute

// Preflight runs the target's preflight command, if it has one, once, in a
// sandbox of two tenants under root (the environment, working folder and
// managed scope of every target process), and returns what it printed. A
// non-zero exit is an error wrapping ErrPreflight that quotes the output:
// the run must stop there (exit 2), since every scenario would only fail
// for the same reason, or worse pass without the defence it needs.
func Preflight(ctx context.Context, target Target, root string) (string, error) {
	if len(target.Preflight) == 0 || target.Remote() {
		return "", nil
	}
	box, err := NewSandbox(ctx, root, target, SandboxOptions{Tenants: tenants.Options{Names: tenants.Names(2)}})
	if err != nil {
		return "", fmt.Errorf("preflight of %s: %w", target.Name, err)
	}
	defer box.Close()
	ctx, cancel := context.WithTimeout(ctx, preflightWait)
	defer cancel()
	argv := Expand(target.Preflight, map[string]string{"root": box.Root})
	out, err := box.RunCommand(ctx, "preflight", argv, nil)
	if err != nil {
		return out, fmt.Errorf("%w: %s: %w", ErrPreflight, strings.Join(argv, " "), err)
	}
	return out, nil
}
