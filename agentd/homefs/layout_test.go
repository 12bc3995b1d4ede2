package homefs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/cron"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/plugins"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/store"
)

// layoutRow is one file or folder of a home's layout and the agentd code
// path that uses it. drive returns what came back to the tenant (a
// prompt, a model, a key, job names...) and the error.
type layoutRow struct {
	file  string
	drive func(t *testing.T, p profile.Profile) (string, error)
	// followedOK: with the link followed, the code path succeeds where the
	// defence refuses (for a file whose use leaves no trace, jobs.lock).
	followedOK bool
	// sqliteRefuses: SQLite opens its WAL and shared-memory files with
	// O_NOFOLLOW itself, so with the layer off the open still fails, by
	// SQLite's refusal rather than the layer's.
	sqliteRefuses bool
}

// layoutRows is every file and folder of the home layout.
var layoutRows = []layoutRow{
	{file: "config.yaml", drive: func(t *testing.T, p profile.Profile) (string, error) {
		cfg, err := p.LoadConfig()
		if err != nil {
			return "", err
		}
		return cfg.Model.Default, nil
	}},
	{file: ".env", drive: func(t *testing.T, p profile.Profile) (string, error) {
		env, err := p.LoadEnv()
		if err != nil {
			return "", err
		}
		key, _ := env.Lookup("KEY")
		return key, p.SetEnv("MINE", "1")
	}},
	{file: "SOUL.md", drive: systemPrompt},
	{file: "memories/MEMORY.md", drive: systemPrompt},
	{file: "memories", drive: systemPrompt},
	{file: "state.db", drive: openAndWrite},
	{file: "state.db-wal", drive: openAndWrite, sqliteRefuses: true},
	{file: "state.db-shm", drive: openAndWrite, sqliteRefuses: true},
	{file: "logs/agent.log", drive: openAndWrite},
	{file: "logs", drive: openAndWrite},
	{file: "cron/jobs.json", drive: func(t *testing.T, p profile.Profile) (string, error) {
		jobs, err := cron.ForProfile(p).List()
		var names []string
		for _, j := range jobs {
			names = append(names, j.Name)
		}
		return strings.Join(names, ","), err
	}},
	{file: "cron/jobs.lock", followedOK: true, drive: func(t *testing.T, p profile.Profile) (string, error) {
		_, err := cron.ForProfile(p).Create("mine", "p", "every 1h", time.Now())
		return "", err
	}},
	{file: "cron/output", drive: func(t *testing.T, p profile.Profile) (string, error) {
		res := cron.RunOne(context.Background(), p, cron.Job{ID: "job1", Name: "job1", Prompt: "p"}, answer("mine's answer"))
		return "", res.Err
	}},
	{file: "plugins/tool", drive: func(t *testing.T, p profile.Profile) (string, error) {
		has, err := plugins.HasPlugins(p.FS(), "plugins")
		return fmt.Sprint("plugins:", has), err
	}},
	{file: "plugins", drive: func(t *testing.T, p profile.Profile) (string, error) {
		has, err := plugins.HasPlugins(p.FS(), "plugins")
		return fmt.Sprint("plugins:", has), err
	}},
}

func systemPrompt(t *testing.T, p profile.Profile) (string, error) {
	sc, err := scope.Open(context.Background(), p, nil)
	if err != nil {
		return "", err
	}
	defer sc.Close()
	cfg, err := p.LoadConfig()
	if err != nil {
		return "", err
	}
	return sc.SystemPrompt(cfg)
}

// openAndWrite opens the scope (state.db and the log) and writes a turn's
// worth: a session and a log line.
func openAndWrite(t *testing.T, p profile.Profile) (string, error) {
	sc, err := scope.Open(context.Background(), p, nil)
	if err != nil {
		return "", err
	}
	defer sc.Close()
	sc.Log.Info("a line of mine")
	_, err = sc.DB.CreateSession(context.Background(), store.Session{Profile: p.Name, Model: "m", Title: "mine"})
	return "", err
}

type answer string

func (a answer) RunJob(context.Context, profile.Profile, cron.Job) (string, error) {
	return string(a), nil
}

// fillHome makes a full home whose every file carries canary-<name>.
func fillHome(t *testing.T, dir, name string) {
	t.Helper()
	c := "canary-" + name
	p := profile.Profile{Name: name, Home: dir}
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, p.Skeleton())
	files := map[string]string{
		"config.yaml":                 "model:\n  default: " + c + "-model\n",
		".env":                        "KEY=" + c + "-key\n",
		"SOUL.md":                     c + "-soul",
		"memories/MEMORY.md":          c + "-memory",
		"logs/agent.log":              c + "-log\n",
		"cron/jobs.json":              `{"jobs":[{"id":"j` + name + `","name":"` + c + `-job","prompt":"p","schedule":"every 1h","enabled":true}]}`,
		"cron/jobs.lock":              "",
		"plugins/tool/plugin.yaml":    "name: " + c + "-plugin\n",
		"cron/output/job1/earlier.md": c + "-output",
	}
	for f, text := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(text), 0o600))
	}
	db, err := store.Open(context.Background(), filepath.Join(dir, "state.db"))
	require.NoError(t, err)
	_, err = db.CreateSession(context.Background(), store.Session{Profile: name, Model: "m", Title: c + "-session"})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	// a WAL and shared-memory file to link to, as a live database has
	require.NoError(t, os.WriteFile(filepath.Join(dir, "state.db-wal"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "state.db-shm"), nil, 0o600))
}

// snapshot is every entry of dir with its content (files) or target
// (links).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	}))
	return out
}

// TestEveryHomeFileAsALink plants, for every file and folder of the home
// layout, a symlink to the same file in another home and in a stand-in
// for a system path (an absolute path outside every home), drives the
// agentd code path that uses it, and asserts the refusal (ErrLinkOut,
// naming the file), that nothing of the other place came back, and that
// nothing was written there. With home-follows-links seeded, the same
// link is followed (the positive control).
func TestEveryHomeFileAsALink(t *testing.T) {
	t.Parallel()
	for _, row := range layoutRows {
		for _, target := range []string{"other", "sys"} {
			for _, seeded := range []bool{false, true} {
				name := fmt.Sprintf("%s->%s", row.file, target)
				if seeded {
					name += "/fault"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					root := t.TempDir()
					mine, there := filepath.Join(root, "mine"), filepath.Join(root, target)
					fillHome(t, mine, "mine")
					fillHome(t, there, target)
					require.NoError(t, os.RemoveAll(filepath.Join(mine, row.file)))
					require.NoError(t, os.Symlink(filepath.Join(there, row.file), filepath.Join(mine, row.file)))
					before := snapshot(t, there)

					p := profile.Profile{Name: "mine", Home: mine}
					if seeded {
						p.Faults = faults.Set{faults.HomeFollowsLinks: true}
					}
					out, err := row.drive(t, p)
					after := snapshot(t, there)
					leaked := strings.Contains(out, "canary-"+target) || strings.Contains(fmt.Sprint(err), "canary-"+target)
					if !seeded {
						require.ErrorIs(t, err, homefs.ErrLinkOut)
						require.ErrorContains(t, err, "home file "+row.file)
						require.ErrorContains(t, err, "is a link out of the home")
						require.False(t, leaked, "nothing of %s came back: %q, %v", target, out, err)
						require.Equal(t, before, after, "nothing written in %s", target)
						return
					}
					if row.sqliteRefuses {
						require.Error(t, err)
						require.NotErrorIs(t, err, homefs.ErrLink, "the layer is off: what refuses is SQLite's own O_NOFOLLOW")
						return
					}
					followed := leaked || !equal(before, after) || (row.followedOK && err == nil) ||
						strings.Contains(out, "plugins:true")
					require.True(t, followed, "the fault follows the link: out %q, err %v", out, err)
				})
			}
		}
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A link error is one the layer's callers can tell apart from any other.
func TestLinkErrorIsNotOtherErrors(t *testing.T) {
	t.Parallel()
	err := &homefs.LinkError{Name: "SOUL.md", Out: false}
	require.True(t, errors.Is(err, homefs.ErrLink))
	require.False(t, errors.Is(err, homefs.ErrLinkOut))
	require.False(t, errors.Is(err, fs.ErrNotExist))
}
