package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

// eachSeeded runs body twice, each a subtest with a fixture of its own:
// with fault off (the defence) and on (its positive control).
func eachSeeded(t *testing.T, fault faults.Name, body func(t *testing.T, f *fixture, seeded bool)) {
	for _, seeded := range []bool{false, true} {
		t.Run(fmt.Sprintf("fault=%v", seeded), func(t *testing.T) {
			t.Parallel()
			f := newFixtureWith(t, func(fakellm.Record) fakellm.Response { return fakellm.Text("ok") }, func(o *Options) {
				if seeded {
					o.Faults = faults.Set{fault: true}
				}
			})
			body(t, f, seeded)
		})
	}
}

// A slug is a name, never a path: model.save_key refuses one outside the
// slug alphabet (-32602) and writes nothing anywhere. The slug half of the
// tenant-text-as-path fault keeps the key in keys/<slug>.key, the slug
// joined unchecked, so a slug of ../../../evil writes into the launch
// profile's home (the positive control of the slug-path chain).
func TestSlugIsNeverAPath(t *testing.T) {
	t.Parallel()
	eachSeeded(t, faults.TenantTextAsPath, func(t *testing.T, f *fixture, seeded bool) {
		c := newConn("c")
		launch, err := f.homes.Path("")
		require.NoError(t, err)
		bHome, err := f.homes.Path("b")
		require.NoError(t, err)
		// From b's keys folder, three levels up is the launch home.
		evil := filepath.Join(launch, "evil.key")
		res := f.call(c, "model.save_key", map[string]any{"profile": "b", "slug": "../../../evil", "api_key": "key-of-b"})
		env, err := os.ReadFile(filepath.Join(bHome, ".env"))
		require.NoError(t, err)
		require.NotContains(t, string(env), "key-of-b", "a refused (or faulty) slug saves nothing in b's .env")
		if !seeded {
			require.Equal(t, rpc.CodeInvalidParams, code(res), "%v", res)
			require.Contains(t, fmt.Sprint(res["error"]), "want 1-64 of [a-z0-9_]", "the error names the rule")
			require.NoFileExists(t, evil)
			require.NoDirExists(t, filepath.Join(bHome, "keys"))
		} else {
			require.Zero(t, code(res), "%v", res)
			require.Equal(t, evil, res["result"].(map[string]any)["file"])
			got, err := os.ReadFile(evil)
			require.NoError(t, err)
			require.Equal(t, "key-of-b\n", string(got), "the key landed in another profile's home")
		}

		// A good slug: its .env variable, and under the fault its key file too.
		require.Zero(t, code(f.call(c, "model.save_key", map[string]any{"profile": "b", "slug": "good", "api_key": "key-good"})))
		env, err = os.ReadFile(filepath.Join(bHome, ".env"))
		require.NoError(t, err)
		require.Contains(t, string(env), "GOOD_API_KEY=key-good")
		if seeded {
			require.FileExists(t, filepath.Join(bHome, "keys", "good.key"))
		} else {
			require.NoDirExists(t, filepath.Join(bHome, "keys"))
		}
	})
}

// The plugins' state facade is the session's own: two sessions of two
// profiles keep different values under one key. Under the
// global-plugin-state fault the key is one key for the whole process, so
// the second writer's value is what the first session reads (the positive
// control of colliding-inputs' plugin state keys).
func TestPluginStateIsTheSessions(t *testing.T) {
	t.Parallel()
	eachSeeded(t, faults.GlobalPluginState, func(t *testing.T, f *fixture, seeded bool) {
		c := newConn("c")
		sid := map[string]string{}
		for _, p := range []string{"", "b"} {
			res := f.call(c, "session.create", map[string]any{"profile": p})
			require.Zero(t, code(res), "%v", res)
			sid[p] = res["result"].(map[string]any)["session_id"].(string)
		}
		ctx := context.Background()
		// A key of this test only: the fault's map is the process's.
		key := fmt.Sprintf("collide-%s-%v", t.Name(), seeded)
		for _, p := range []string{"", "b"} {
			_, err := f.srv.Facade(ctx, sid[p], "state", "set", []string{key, "value-of-" + p})
			require.NoError(t, err)
		}
		got, err := f.srv.Facade(ctx, sid[""], "state", "get", []string{key})
		require.NoError(t, err)
		if seeded {
			require.Equal(t, "value-of-b", got, "the fault serves b's value to the launch profile's session")
		} else {
			require.Equal(t, "value-of-", got, "each session reads back its own value")
		}
		got, err = f.srv.Facade(ctx, sid["b"], "state", "get", []string{key})
		require.NoError(t, err)
		require.Equal(t, "value-of-b", got)
	})
}
