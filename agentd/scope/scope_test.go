package scope

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

func TestPoolScopesAreSeparate(t *testing.T) {
	t.Parallel()
	homes := homesWithB(t)
	pool := NewPool(homes, []string{"PATH=/bin", "OPENAI_API_KEY=process-secret"}, nil)
	defer pool.Close()
	ctx := context.Background()

	a, err := pool.Get(ctx, "")
	require.NoError(t, err)
	b, err := pool.Get(ctx, "b")
	require.NoError(t, err)
	again, err := pool.Get(ctx, profile.LaunchName)
	require.NoError(t, err)
	require.Same(t, a, again, "one scope per profile")
	require.NotSame(t, a.DB, b.DB)
	_, err = pool.Get(ctx, "ghost")
	require.ErrorIs(t, err, profile.ErrUnknownProfile)

	for _, sc := range []*Scope{a, b} {
		require.NoError(t, sc.Profile.SetConfig("model.key_env", "TENANT_PROVIDER_KEY"))
		require.NoError(t, sc.Profile.SetEnv("TENANT_PROVIDER_KEY", "key-of-"+sc.Profile.Name))
	}
	sa, err := a.Load()
	require.NoError(t, err)
	sb, err := b.Load()
	require.NoError(t, err)
	require.Equal(t, "key-of-default", sa.Key)
	require.Equal(t, "key-of-b", sb.Key)
	require.Equal(t, "key-of-b", a.Client(sb).APIKey)
	require.NotEqual(t, sa.KeyFingerprint(), sb.KeyFingerprint())
	require.False(t, strings.Contains(sa.KeyFingerprint(), "key-of"))
	require.Contains(t, sb.ToolEnv, "HOME="+b.Profile.Home)
	require.NotContains(t, strings.Join(sb.ToolEnv, "\n"), "process-secret")
	require.NotContains(t, strings.Join(sb.ToolEnv, "\n"), "key-of-default")

	a.Log.Info("hello from a")
	logA, err := os.ReadFile(a.Profile.File("logs", "agent.log"))
	require.NoError(t, err)
	require.Contains(t, string(logA), "hello from a")
	logB, err := os.ReadFile(b.Profile.File("logs", "agent.log"))
	require.NoError(t, err)
	require.NotContains(t, string(logB), "hello from a")

	// A profile whose home is deleted is no longer served.
	require.NoError(t, homes.Delete("b"))
	_, err = pool.Get(ctx, "b")
	require.ErrorIs(t, err, profile.ErrUnknownProfile)
}

func TestSystemPromptParts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := profile.Profile{Name: profile.LaunchName, Home: root}
	sc, err := Open(context.Background(), p, nil)
	require.NoError(t, err)
	defer sc.Close()
	require.NoError(t, os.WriteFile(p.File("SOUL.md"), []byte("soul text"), 0o600))
	require.NoError(t, os.WriteFile(p.File("memories", "MEMORY.md"), []byte("memory text"), 0o600))
	require.NoError(t, p.SetConfig("custom_prompt", "custom text"))
	snap, err := sc.Load()
	require.NoError(t, err)
	got, err := sc.SystemPrompt(snap.Config)
	require.NoError(t, err)
	require.Equal(t, "soul text\n\nmemory text\n\ncustom text", got)
	require.NoError(t, p.SetConfig("memory.memory_enabled", false))
	snap, err = sc.Load()
	require.NoError(t, err)
	got, err = sc.SystemPrompt(snap.Config)
	require.NoError(t, err)
	require.Equal(t, "soul text\n\ncustom text", got)
	require.NoError(t, sc.Close())
	require.NoError(t, sc.Close(), "Close twice")
}

type closer struct {
	closed *[]string
	name   string
}

func (c closer) Close() error { *c.closed = append(*c.closed, c.name); return nil }

func TestValuesLiveAndDieWithTheScope(t *testing.T) {
	t.Parallel()
	sc, err := Open(context.Background(), profile.Profile{Name: "p", Home: t.TempDir()}, nil)
	require.NoError(t, err)
	var closed []string
	inits := 0
	for i := 0; i < 2; i++ {
		v, err := sc.Value("loader", func() (any, error) { inits++; return closer{&closed, "loader"}, nil })
		require.NoError(t, err)
		require.Equal(t, "loader", v.(closer).name)
	}
	require.Equal(t, 1, inits)
	_, err = sc.Value("second", func() (any, error) { return closer{&closed, "second"}, nil })
	require.NoError(t, err)
	require.NoError(t, sc.Close())
	require.Equal(t, []string{"second", "loader"}, closed, "closed with the scope, in reverse order")
	_, err = sc.Value("late", func() (any, error) { return 1, nil })
	require.ErrorContains(t, err, "closed")
}

// A custom prompt's @<path> is text to agentd: nothing is read from the
// path. The tenant-text-as-path fault reads it, following links (the
// positive control of the prompt-path chain).
func TestPromptFileReferencesAreText(t *testing.T) {
	t.Parallel()
	for _, seeded := range []bool{false, true} {
		root := t.TempDir()
		other := filepath.Join(t.TempDir(), ".env")
		require.NoError(t, os.WriteFile(other, []byte("OTHER_KEY=other-secret"), 0o600))
		p := profile.Profile{Name: profile.LaunchName, Home: root}
		if seeded {
			p.Faults = faults.Set{faults.TenantTextAsPath: true}
		}
		sc, err := Open(context.Background(), p, nil)
		require.NoError(t, err)
		require.NoError(t, p.SetConfig("custom_prompt", "see @"+other+" please"))
		snap, err := sc.Load()
		require.NoError(t, err)
		got, err := sc.SystemPrompt(snap.Config)
		require.NoError(t, err)
		if seeded {
			require.Contains(t, got, "OTHER_KEY=other-secret")
		} else {
			require.Equal(t, "see @"+other+" please", got)
		}
		require.NoError(t, sc.Close())
	}
}

// homesWithB are a launch home and a managed scope in a temporary folder,
// and a profile b.
func homesWithB(t *testing.T) profile.Homes {
	t.Helper()
	root := t.TempDir()
	homes := profile.Homes{Launch: filepath.Join(root, "launch"), Managed: filepath.Join(root, "managed")}
	_, err := homes.Create("b")
	require.NoError(t, err)
	return homes
}
