// Which modes run on this machine: probed once per process.

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/outerenv"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// probe results, once per process.
var (
	probeOnce sync.Once
	probed    map[Mode]error
)

// Available says whether mode m can run here: nil, or why not (wrapping
// ErrUnavailable). Auto and None are always available.
func Available(m Mode) error {
	probeOnce.Do(func() {
		probed = map[Mode]error{Bwrap: probeBwrap(), Landlock: probeLandlock()}
	})
	if err, ok := probed[m]; ok {
		return err
	}
	return nil
}

// Resolve is the mode a configured value m runs as here. Auto resolves as
// Effective does (None, with why, when nothing works); bwrap and landlock
// come back as they are, or an error wrapping ErrUnavailable when they
// cannot run here; None comes back with why ("terminal.sandbox is none").
func Resolve(m Mode) (eff Mode, why string, err error) {
	switch m {
	case Auto, "":
		eff, err := Effective(Auto)
		if err != nil {
			return None, err.Error(), nil
		}
		return eff, "", nil
	case Bwrap, Landlock:
		if err := Available(m); err != nil {
			return None, "", err
		}
		return m, "", nil
	default:
		return None, "terminal.sandbox is none", nil
	}
}

// Effective resolves Auto to the best mode that works here: bwrap, else
// landlock, else None with the reasons (an error wrapping ErrUnavailable).
// Other modes come back as they are.
func Effective(m Mode) (Mode, error) {
	if m != Auto && m != "" {
		return m, nil
	}
	berr := Available(Bwrap)
	if berr == nil {
		return Bwrap, nil
	}
	lerr := Available(Landlock)
	if lerr == nil {
		return Landlock, nil
	}
	return None, fmt.Errorf("no sandbox works here: %v; %v", berr, lerr)
}

func probeBwrap() error {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return fmt.Errorf("%w: bwrap: bubblewrap is not installed (package bubblewrap)", ErrUnavailable)
	}
	home, err := os.MkdirTemp("", "agentd-sandbox-probe-")
	if err != nil {
		return fmt.Errorf("%w: bwrap: probe: %v", ErrUnavailable, err)
	}
	defer os.RemoveAll(home)
	p := Policy{Mode: Bwrap, Home: home, Dir: home}
	argv := append(p.bwrapArgs(false, -1, nil), "true")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := procgroup.CommandContext(ctx, path, argv[1:]...)
	cmd.Env = outerenv.Own() // as every bwrap agentd starts
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("%w: bwrap: a trial run did not end within 20s", ErrUnavailable)
	}
	if err != nil {
		return fmt.Errorf("%w: bwrap: a trial run with new PID, IPC and UTS namespaces failed (%v: %s): user namespaces are refused here (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces, or an AppArmor profile for bwrap)",
			ErrUnavailable, err, strings.TrimSpace(string(out)))
	}
	return nil
}
