package invariants

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// A process carrying a tenant's canary is seen while it lives (the positive
// control), becomes a finding naming pid, process, owner and the event it
// outlived, and is no longer seen once it is gone.
func TestEscapesSeesAProcessCarryingACanary(t *testing.T) {
	t.Parallel()
	tag, err := tenants.NewTag()
	require.NoError(t, err)
	key := tenants.Canary{Owner: "alpha", Kind: tenants.ProviderKey, Value: tenants.CanaryValue(tenants.ProviderKey, "alpha", tag)}
	mark := tenants.Canary{Owner: "alpha", Kind: "escape_mark", Value: tenants.CanaryValue("escape_mark", "alpha", tag)}
	other := tenants.Canary{Owner: "beta", Kind: tenants.ProviderKey, Value: tenants.CanaryValue(tenants.ProviderKey, "beta", tag)}
	cmd := exec.Command("sh", "-c", "sleep 300; : "+mark.Value)
	cmd.Env = []string{"TENANT_PROVIDER_KEY=" + key.Value}
	procgroup.Prepare(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = procgroup.Kill(cmd.Process.Pid); _ = cmd.Wait() })

	ev := Ended{Event: "session s-1 of alpha closed", Canaries: []tenants.Canary{key, mark, other}}
	var fs []Finding
	require.Eventually(t, func() bool {
		fs = Escapes(ev)
		return len(fs) >= 2 // the shell and its sleep
	}, 10*time.Second, 10*time.Millisecond)
	var shell *Finding
	for i, f := range fs {
		assert.Equal(t, ProcessEscape, f.Invariant)
		assert.Equal(t, "alpha", f.Tenant, "only alpha's canaries are carried: %s", f)
		assert.Contains(t, f.Detail, "outlived session s-1 of alpha closed")
		if strings.Contains(f.Where.Label, "pid "+strconv.Itoa(cmd.Process.Pid)+" (sh)") {
			shell = &fs[i]
		}
	}
	require.NotNil(t, shell, "findings: %v", fs)
	assert.Equal(t, "command line", shell.Where.Part, "the mark in its arguments is the first match")

	require.NoError(t, procgroup.Kill(cmd.Process.Pid))
	_ = cmd.Wait()
	assert.Eventually(t, func() bool { return len(Escapes(ev)) == 0 }, 10*time.Second, 10*time.Millisecond)
}

func TestEscapesOfIgnoresCarriersOfOtherCanaries(t *testing.T) {
	t.Parallel()
	ev := Ended{Event: "the server stopped", Canaries: []tenants.Canary{{Owner: "beta", Kind: tenants.Memory, Value: "memory-beta-0123456789"}}}
	fs := EscapesOf(ev, []procgroup.Carrier{
		{Pid: 7, Comm: "sleep", Needle: "memory-alpha-0123456789", In: "environment"},
		{Pid: 8, Comm: "sleep", Needle: "memory-beta-0123456789", In: "environment", Cmdline: "sleep 600"},
		{Pid: 8, Comm: "sleep", Needle: "memory-beta-0123456789", In: "environment", Cmdline: "sleep 600"},
	})
	require.Len(t, fs, 1)
	assert.Equal(t, "process_escape: beta pid 8 (sleep) environment: carries beta's memory: the process outlived the server stopped: sleep 600", fs[0].String())
	assert.True(t, ProcessEscape.Leak())
}

// A process carrying several tenants' canaries is its owner's: the mark in
// its command line, then the provider key in its environment, decide.
func TestEscapesOfNamesTheProcessOwner(t *testing.T) {
	t.Parallel()
	a := []tenants.Canary{{Owner: "alpha", Kind: "hostile_write", Value: "hostile-write-alpha-0123456789"}}
	b := []tenants.Canary{{Owner: "beta", Kind: tenants.ProviderKey, Value: "provider-key-beta-0123456789"},
		{Owner: "beta", Kind: "escape_mark", Value: "escape-mark-beta-0123456789"}}
	ev := Ended{Event: "the server's stop", Canaries: append(a, b...)}
	fs := EscapesOf(ev, []procgroup.Carrier{
		{Pid: 9, Comm: "sleep", Needle: a[0].Value, In: "environment"},
		{Pid: 9, Comm: "sleep", Needle: b[0].Value, In: "environment"},
		{Pid: 10, Comm: "sh", Needle: a[0].Value, In: "environment"},
		{Pid: 10, Comm: "sh", Needle: b[0].Value, In: "environment"},
		{Pid: 10, Comm: "sh", Needle: b[1].Value, In: "command line"},
	})
	require.Len(t, fs, 2)
	assert.Equal(t, "beta", fs[0].Tenant)
	assert.Equal(t, tenants.Kind("escape_mark"), fs[0].Kind)
	assert.Equal(t, "beta", fs[1].Tenant)
	assert.Equal(t, tenants.ProviderKey, fs[1].Kind)
}
