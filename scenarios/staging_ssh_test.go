package scenarios

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// stagingSSHAll runs the whole catalog in TestStagingOverSSH, not its
// representative subset.
const stagingSSHAll = "TENANTCANARY_STAGING_SSH_ALL"

// stagingSSHRemoteOnly are the scenarios the whole catalog over ssh skips
// for the server being remote, each for what remote: cannot yet give:
// surface watches the server's reads with inotify and fanotify and
// samples its /proc here; hostile-chains and hostile-restarts hand a
// tenant paths in its own home and put homes back between rows, which a
// push does not carry (homes_in_place). Issue 48 asks for two at most.
var stagingSSHRemoteOnly = []string{"surface", "hostile-chains", "hostile-restarts"}

// stagingSSHRun, when set, is the regexp of the scenarios
// TestStagingOverSSH runs (as canary-run's --run), in place of its subset
// or the whole catalog: to run one family over ssh by hand.
const stagingSSHRun = "TENANTCANARY_STAGING_SSH_RUN"

// stagingSSHSubset are the scenarios TestStagingOverSSH runs by default:
// a pooled run whose files are pulled and scanned, scoped writes, a
// restart, stdio-separate (its backends run on the host through the
// target file's stdio command over ssh), and hostile-tools, whose escapes
// are read from the process listing over ssh (one grep of /proc per
// listing: 1m17s alone on a loaded machine, where a shell loop forking
// base64 per process took 3m37s and, beside the race-detected suite,
// outlasted its deadline).
var stagingSSHSubset = []string{"pooled-serve", "settings-writes", "restart-resume", "stdio-separate", "hostile-tools"}

// A staging agentd reached only over its port and ssh: the catalog plants,
// reads and scans its homes, restarts it and lists its processes through
// the target file's remote: commands, and certifies it.
func TestStagingOverSSH(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	// The harness cannot see the server's homes: they are on the
	// namespace's tmpfs.
	ents, err := os.ReadDir(st.server)
	require.NoError(t, err)
	require.Empty(t, ents, "the server's folder is empty from outside its namespace")

	ids := stagingSSHSubset
	if os.Getenv(stagingSSHAll) != "" {
		ids = nil
		for _, s := range Default().All() {
			if s.ID != "noisy-neighbour" { // its verdict needs a quiet machine (TestCatalogAgainstAgentd)
				ids = append(ids, s.ID)
			}
		}
	}
	for i := range ids {
		ids[i] = regexp.QuoteMeta(ids[i])
	}
	run := "^(" + strings.Join(ids, "|") + ")$"
	if r := os.Getenv(stagingSSHRun); r != "" {
		run = r
	}
	start := time.Now()
	var progress syncio.Buffer
	reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: run, Progress: &progress})
	require.NoError(t, err)
	t.Logf("progress:\n%s", progress.String())
	st.noRunProcessesLeft(t)
	for _, r := range reps {
		for _, sk := range r.Skipped {
			t.Logf("%s: check %s not made: %s", r.ID, sk.Invariant, sk.Reason)
		}
	}
	var ran, skipped, remoteOnly []string
	local := agentdTarget()
	for _, r := range reps {
		switch r.Result {
		case Skipped:
			skipped = append(skipped, r.ID+": "+r.Reason)
			if spec, err := Default().Get(r.ID); err == nil && spec.unmet(local) == "" {
				remoteOnly = append(remoteOnly, r.ID+": "+r.Reason)
			}
		case Pass:
			ran = append(ran, r.ID)
			for _, sk := range r.Skipped {
				assert.NotEmpty(t, sk.Reason, "%s: skipped check %s", r.ID, sk.Invariant)
			}
		default:
			t.Errorf("%s: %s: %s\n%s", r.ID, r.Result, r.Reason, strings.Join(r.Log, "\n"))
		}
	}
	t.Logf("over ssh in %v: %d passed, %d skipped:\n%s", time.Since(start).Round(time.Second), len(ran), len(skipped), strings.Join(skipped, "\n"))
	if os.Getenv(stagingSSHAll) == "" && os.Getenv(stagingSSHRun) == "" {
		assert.Empty(t, skipped, "the subset's scenarios all run over ssh")
	}
	// Against the whole catalog, the scenarios the embedded agentd runs on
	// the harness's own machine but the ssh staging run skips for the
	// server being remote are exactly stagingSSHRemoteOnly (a scenario
	// agentd's own shape skips everywhere, such as a gateway scenario
	// needing a provisioner, is no cost of the remote path): one more is a
	// regression, one fewer an update of the list and of docs/staging.md.
	t.Logf("skipped over ssh only: %d\n%s", len(remoteOnly), strings.Join(remoteOnly, "\n"))
	if os.Getenv(stagingSSHAll) != "" && os.Getenv(stagingSSHRun) == "" {
		var ids []string
		for _, r := range remoteOnly {
			ids = append(ids, r[:strings.Index(r, ":")])
		}
		assert.ElementsMatch(t, stagingSSHRemoteOnly, ids, "scenarios the embedded agentd runs but the ssh staging run skips:\n%s", strings.Join(remoteOnly, "\n"))
	}
	// The whole catalog skips the scenarios that need a stdio backend, a
	// gateway, replicas, stores or the server on this machine, each with
	// its reason (docs/staging.md lists them).
	for _, s := range skipped {
		assert.Contains(t, s, ": needs ", "a skip says what it needs")
	}

	// The gateway family runs against agentd's gateway on the staging
	// host: gateway-tenants restarted it through remote.stop and
	// remote.start, and colliding-inputs made its gateway chats.
	for _, r := range reps {
		if r.Result == Skipped || (r.ID != "gateway-tenants" && r.ID != "colliding-inputs") {
			continue
		}
		for _, sk := range r.Skipped {
			assert.NotEqual(t, "restart", sk.Invariant, "%s: the gateway was restarted over ssh: %s", r.ID, sk.Reason)
			assert.NotContains(t, sk.Reason, "gateway chats not tried", r.ID)
		}
	}

	// The files were read through ssh: pooled-serve's file check ran and
	// counted the server's files.
	for _, r := range reps {
		if r.ID != "pooled-serve" {
			continue
		}
		last := r.Phases[len(r.Phases)-1]
		assert.Positive(t, last.Counts.Files, "pooled-serve scanned the server's files, pulled over ssh")
		for _, sk := range r.Skipped {
			assert.NotEqual(t, "file", sk.Invariant, "the file check ran: %s", sk.Reason)
		}
	}
}

// stagingSSHFaultsPick, when set, is the regexp of the seeded faults
// TestStagingOverSSHCatchesSeededFaults seeds (of sshFaults, slow ones
// too), in place of its default.
const stagingSSHFaultsPick = "TENANTCANARY_STAGING_SSH_FAULTS"

// sshFault is a seeded fault of the self-test that the ssh staging test
// seeds as the operator would (the control script's agentd-faults, read
// by the server, its gateway and its CLI) and must catch through ssh.
type sshFault struct {
	name string
	// slow ones run with TENANTCANARY_STAGING_SSH_ALL (their scenarios
	// take minutes over ssh), or when TENANTCANARY_STAGING_SSH_FAULTS
	// names them.
	slow bool
	// where the finding must point: "host", a path on the server's host
	// (remote.home or remote.shared); "gateway", a route of the gateway at
	// gateway_url; "command", the stdio command's own process on the host.
	where string
}

// sshFaults: each acts through one of the remote paths.
var sshFaults = []sshFault{
	{name: "shared-state-db", where: "host"},   // the file check on the homes pulled over ssh
	{name: "wrong-write-scope", where: "host"}, // the write-scope check, its snapshots pulled over ssh
	{name: "tmp-copy", where: "host"},          // the shared-place check on remote.shared
	{name: "log-secret-encoded"},               // the text check on remote.logs, read through remote.exec
	{name: "gateway-any-model", where: "gateway"},
	{name: "model-bleed"},                             // stdio-separate, through the stdio command over ssh
	{name: "launch-mode-isolation", where: "command"}, // entry-points: the plugin ran in the stdio command's process
	{name: "escaped-process", slow: true},             // the escape check, on remote.processes
	{name: "gateway-failover-foreign", slow: true, where: "gateway"},
}

// The seeded faults that act through a remote server are caught through
// ssh, each named where the server's host has it (docs/staging.md lists
// those that cannot act through one). The hostile-plugin faults have
// nothing to act on in the stage: its agentd sandboxes with Landlock
// (bwrap cannot mount a new /proc inside the stage's own bwrap
// namespace), whose launcher ends what a plugin host started, keeper or
// not. The cluster faults are TestStagingClusterOverSSH's. With
// TENANTCANARY_STAGING_SSH_ALL (or TENANTCANARY_STAGING_SSH_FAULTS), every
// other fault of the self-test whose scenario runs over ssh is seeded too:
// each that can act through a remote server must be caught through it.
func TestStagingOverSSHCatchesSeededFaults(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	var pick *regexp.Regexp
	if r := os.Getenv(stagingSSHFaultsPick); r != "" {
		pick = regexp.MustCompile(r)
	}
	byName := map[string]Fault{}
	for _, f := range Faults() {
		byName[f.Name] = f
	}
	list := append([]sshFault(nil), sshFaults...)
	if pick != nil || os.Getenv(stagingSSHAll) != "" {
		// Every other fault of the self-test that can act through this
		// target: its scenario runs over ssh, and the stage's agentd
		// sandboxes as the fault needs (Landlock: bwrap cannot mount a new
		// /proc inside the stage's own bwrap namespace).
		listed := map[string]bool{}
		for _, sf := range list {
			listed[sf.name] = true
		}
		for _, f := range Faults() {
			spec, err := Default().Get(f.Scenario)
			require.NoError(t, err)
			switch {
			case listed[f.Name]:
			case spec.unmet(tg) != "":
				t.Logf("%s cannot act through the ssh stage: %s %s", f.Name, f.Scenario, spec.unmet(tg))
			case f.Sandbox() == "bwrap":
				t.Logf("%s cannot act through the ssh stage: it takes away a defence of bwrap, and the stage's agentd sandboxes with Landlock", f.Name)
			case f.Scenario == "noisy-neighbour":
				t.Logf("%s is not run over ssh: noisy-neighbour's verdict needs a quiet machine", f.Name)
			case f.Name == "cron-tick-in-process":
				t.Logf("%s cannot act through the ssh stage: the cron tick over ssh ends before remote.processes can list it, so entry-points' in-process check of it is skipped there", f.Name)
			default:
				list = append(list, sshFault{name: f.Name, slow: true})
			}
		}
	}
	ran := 0
	var missed []string
	for _, sf := range list {
		f, ok := byName[sf.name]
		require.True(t, ok, "%s is no fault of the self-test", sf.name)
		if (pick != nil && !pick.MatchString(f.Name)) || (pick == nil && sf.slow && os.Getenv(stagingSSHAll) == "") {
			continue
		}
		ran++
		st.seedFault(t, f.Name)
		reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: "^" + regexp.QuoteMeta(f.Scenario) + "$"})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		r := &reps[0]
		if !assert.True(t, found(r, f.Expect), "%s: %s over ssh found no %s finding: %s\n%s", f.Name, f.Scenario, f.Expect, r.Result, strings.Join(r.Log, "\n")) {
			missed = append(missed, f.Name)
		}
		for _, fd := range r.Findings() {
			if fd.Invariant != f.Expect {
				continue
			}
			switch {
			case sf.where == "gateway" && fd.Where.Path != "":
				assert.Contains(t, fd.Where.Label, "gateway", "%s: the finding names the gateway's route: %+v", f.Name, fd.Where)
			case sf.where == "host" && fd.Where.Path != "":
				onHost := strings.HasPrefix(fd.Where.Path, tg.Reach.Home+"/")
				for _, sh := range tg.Reach.Shared {
					onHost = onHost || strings.HasPrefix(fd.Where.Path, sh+"/")
				}
				assert.True(t, onHost, "%s: the finding names the server's path: %s", f.Name, fd.Where.Path)
			}
		}
		if sf.where == "command" {
			// Not only its reads: the plugin's process is the stdio
			// command's own on the server's host.
			assert.True(t, slices.ContainsFunc(r.Findings(), func(fd invariants.Finding) bool {
				return strings.Contains(fd.Detail, "in the command's own process")
			}), "%s: no finding names the command's own process:\n%s", f.Name, strings.Join(r.Log, "\n"))
		}
		st.noRunProcessesLeft(t)
	}
	require.Positive(t, ran, "no fault picked")
	t.Logf("%d seeded fault(s) over ssh, %d missed: %v", ran, len(missed), missed)
	st.seedFault(t, "")
}

// target check walks a running server's stdio command as it walks its
// websocket: a backend, a session and a turn per tenant, here over ssh.
func TestTargetCheckOverSSHWalksStdio(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	var out syncio.Buffer
	err = harness.DryPass(t.Context(), tg, t.TempDir(), &out, 2*time.Minute)
	require.NoError(t, err, "%s", out.String())
	_, stdio, ok := strings.Cut(out.String(), "----  stdio")
	require.True(t, ok, "no stdio walk:\n%s", out.String())
	assert.Contains(t, stdio, "stdio backends, each ready", "%s", out.String())
	assert.Equal(t, 2, strings.Count(stdio, "ok    turn "), "a turn per tenant over the stdio command:\n%s", out.String())
	st.noRunProcessesLeft(t)
}
