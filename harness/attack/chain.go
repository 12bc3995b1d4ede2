package attack

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// ChainClass groups the multi-step attacks by the power a tenant chains.
type ChainClass string

const (
	// HomeLink: a file of the tenant's own home replaced by a symlink to
	// the same file of another home (or a system path), which the server,
	// outside every sandbox, follows at its next read or write.
	HomeLink ChainClass = "home-link"
	// Setting: a setting the tenant may change (an RPC, its own config
	// file) pointed at another tenant's places or the system's.
	Setting ChainClass = "setting"
	// OperatorSetting: what only the operator may set, written into the
	// tenant's own config file.
	OperatorSetting ChainClass = "operator-setting"
	// TenantPath: tenant data (a job id, a job name, a slug) that the
	// server uses as a path or a name.
	TenantPath ChainClass = "tenant-path"
	// Persistence: a plant that takes effect when the server restarts.
	Persistence ChainClass = "persistence"
	// Race: the tenant's requests loop while the operator deletes and
	// re-creates (or re-keys) its profile.
	Race ChainClass = "race"
)

// ChainClasses lists every class, in the order a scenario runs them.
var ChainClasses = []ChainClass{HomeLink, Setting, TenantPath, OperatorSetting, Persistence, Race}

// Trigger is what makes the server (the operator, or another tenant) act
// on what the steps planted.
type Trigger string

const (
	OnTurn          Trigger = "turn"           // the attacker's next turn, in a new session
	OnSession       Trigger = "session"        // the attacker's session.create
	OnRPC           Trigger = "rpc"            // the attacker's last RPC step (its reply is the effect)
	OnCron          Trigger = "cron"           // the server's cron ticker runs the attacker's job
	OnRestart       Trigger = "restart"        // the server restarts, then the attacker's next turn
	OnCrash         Trigger = "crash"          // the server is killed (no shutdown: a crash, an OOM kill) and started again, then the attacker's next turn
	OnNeighbourTurn Trigger = "neighbour-turn" // the victim's next turn
	OnOperator      Trigger = "operator"       // the operator deletes and re-creates (re-keys) the profile
)

// Role says which tenant must attack: a row that only the launch profile
// (or only a named one) can run names it.
type Role string

const (
	AnyTenant Role = ""       // any tenant
	Launch    Role = "launch" // the launch profile's tenant
	Named     Role = "named"  // a named (non-launch) profile's tenant
)

// Step is one legitimate action of the attacker, a template: Tool is a
// terminal command run by its own model in its own sandbox, Plugin the ID
// of a Plugin row its own plugin runs, Op a logical RPC operation (the
// dialect maps it) made on its own connection with Params (the scenario
// adds the addressing: the attacker's session or profile). Save keeps
// fields of an RPC's result (dotted paths) as placeholders of the later
// steps. NewSession runs a tool step in a session opened for it (a shell
// started after a settings change). A refused RPC step ends the chain:
// the server did what a server that isolates its tenants does.
type Step struct {
	Tool       string
	Plugin     string
	Op         string
	Params     map[string]any
	Save       map[string]string
	NewSession bool
}

// Chain is one multi-step attack: one tenant's legitimate Steps, then the
// Trigger, then (when set) Probe, a tool step the attacker runs after the
// trigger in a new session (what it brings back is a tool result, where
// the request invariant sees foreign canaries). Restore
// lists the home files (templates) the steps replace or edit, which the
// harness puts back (a link removed, "<file>.chain-bak" renamed back, or
// the copy it kept of the file before the steps written back); Undo are
// RPC steps that put the attacker's settings back.
type Chain struct {
	ID      string // unique, [a-z0-9-]
	Class   ChainClass
	Tries   string // what the attacker tries, one line
	Refusal string // what a server that isolates its tenants does instead, one line
	// Fault is the seeded fault of agentd that switches this row's defence
	// off (agentd/faults/multistep.go), so the self-test re-opens it.
	Fault string
	// Expect is the invariant whose finding shows the attack landed.
	Expect invariants.Invariant
	Role   Role
	// Needs are the home files (tenants.FileNames' yaml names) the chain uses: a
	// target whose layout lacks one skips the row.
	Needs   []string
	Steps   []Step
	Trigger Trigger
	// Say is the text of the trigger's turn (a template); it carries the
	// attacker's write canary, so what the server stores or writes of the
	// turn shows in a foreign home.
	Say     string
	Probe   Step
	Restore []string
	Undo    []Step
	// InstallPlugin: the attacker's home holds ChainPlugin (a tenant may
	// install plugins in its own home; the harness writes the files, as a
	// terminal's line could not carry them).
	InstallPlugin bool
	// ModelPlugin: the attacker's home holds ModelPlugin (in ModelPluginDir
	// under its plugins folder), a model-provider plugin whose profile
	// carries the attacker's write canary (the harness writes it, filled).
	ModelPlugin bool
	// VictimPlugin: the victim's home holds VictimPlugin, whose one tool's
	// description carries a canary of the victim: a server that loads it
	// for the attacker shows it in the attacker's requests.
	VictimPlugin bool
	// HostLimit, when set, is a plugin host limit the steps set in the
	// attacker's own config: after the trigger the harness reads the
	// attacker's plugin hosts' limits (/proc/<pid>/limits), and a host
	// running with the attacker's value is the finding.
	HostLimit *HostLimit
	// OtherDefence, when set, says why Fault alone cannot show this row's
	// leak on agentd: another of its defences still stops the attack. The
	// row's positive control is then a run with AlsoFault on too (the
	// fault that switches that defence off), or, when no fault of agentd
	// does, a target without it (agentd v0.3.0,
	// examples/targets/agentd-v0.3.0, must find the row), or, when no
	// target can be made to land it, ControlTest: the test that the
	// row's effect, landed, is found.
	OtherDefence string
	AlsoFault    string
	ControlTest  string
	// OtherDefenceUnder, when set, is the tool sandbox ("bwrap") the other
	// defence belongs to: where the tenant's shell runs under another
	// (Landlock, on a machine without bubblewrap), it is not there, and
	// the row lands with Fault alone.
	OtherDefenceUnder string
}

// ControlFaults is the AGENTD_FAULTS value of the row's positive control:
// Fault, and AlsoFault when the row has one.
func (c Chain) ControlFaults() string {
	if c.AlsoFault == "" {
		return c.Fault
	}
	return c.Fault + "," + c.AlsoFault
}

// HostLimit is a plugin host limit a chain sets: Key in plugins.host,
// Limit as /proc/<pid>/limits names it, and the distinctive Value the
// attacker chose.
type HostLimit struct {
	Key   string // "open_files_limit"
	Limit string // "Max open files"
	Value int64
}

// The seeded faults the chains re-open (agentd/faults/multistep.go; the
// harness never imports agentd, so the names are repeated here and
// checked against agentd's list by a test).
const (
	FaultHomeFollowsLinks       = "home-follows-links"
	FaultUncheckedJobIDs        = "unchecked-job-ids"
	FaultWorkdirAnywhere        = "workdir-anywhere"
	FaultTenantOperatorSettings = "tenant-operator-settings"
	FaultDeleteRace             = "delete-race"
	FaultTenantTextAsPath       = "tenant-text-as-path"
)

// ChainFaults lists the faults of the chains.
var ChainFaults = []string{FaultHomeFollowsLinks, FaultUncheckedJobIDs, FaultWorkdirAnywhere, FaultTenantOperatorSettings, FaultDeleteRace,
	FaultTenantTextAsPath}

// BackupSuffix names the copy a step keeps of a home file it replaces.
const BackupSuffix = ".chain-bak"

// Placeholders a chain's templates may use (placeholder.Chain, where
// each is documented); the scenario fills them for one attacker and one
// victim (Places.Vars), plus what Save kept.
var Placeholders = placeholder.Chain.Names()

// Fill replaces every {name} of s with vars[name]; unknown names stay.
func Fill(s string, vars map[string]string) string { return placeholder.String(s, vars) }

// FillParams is Fill over every string of an RPC step's params.
func FillParams(p map[string]any, vars map[string]string) map[string]any {
	out := make(map[string]any, len(p))
	for k, v := range p {
		if s, ok := v.(string); ok {
			v = Fill(s, vars)
		}
		out[k] = v
	}
	return out
}

// ToolRow is a tool step as a Row of the single-step catalog, so the
// scenario runs it through the same path as every other attack.
func (c Chain) ToolRow(i int, s Step, vars map[string]string) Row {
	id := fmt.Sprintf("%s-step-%d", c.ID, i+1)
	if s.Plugin == ChainReadRow {
		var globs []any
		for _, g := range strings.Split(Fill(fmt.Sprint(s.Params["globs"]), vars), "\n") {
			globs = append(globs, g)
		}
		return Row{ID: id, Class: Read, Tries: c.Tries, Refusal: c.Refusal,
			Call: func(Canaries) Call { return Call{Tool: ChainPluginTool, Args: map[string]any{"globs": globs}} }}
	}
	if s.Plugin != "" {
		for _, r := range Plugin() {
			if r.ID == s.Plugin {
				r.ID = id + "-" + r.ID
				return r
			}
		}
	}
	cmd := Fill(s.Tool, vars)
	return Row{ID: id, Class: Write, Tries: c.Tries, Refusal: c.Refusal,
		Call: func(Canaries) Call { return terminal(cmd) }}
}

// ProbeRow is the chain's probe as a Row.
func (c Chain) ProbeRow(vars map[string]string) Row {
	r := c.ToolRow(0, c.Probe, vars)
	r.ID, r.Class, r.Refusable = c.ID+"-probe", Read, true
	return r
}

// Touches are the home files (tenants.FileNames' yaml names) the chain
// changes in the attacker's home (what it restores, its plugins) and those
// it reaches in the victim's (a link to "{victim}/{name}", the victim's
// plugins): two chains that touch one file of one tenant cannot share a
// restart. A database and its WAL are one file ("state").
func (c Chain) Touches() (own, victim []string) {
	norm := func(n string) string {
		if n == "state_wal" {
			return "state"
		}
		return n
	}
	for _, r := range c.Restore {
		if name := placeholder.Sole(r); name != "" {
			own = append(own, norm(name))
		}
	}
	if c.InstallPlugin || c.ModelPlugin || c.HostLimit != nil {
		own = append(own, "plugins")
	}
	for _, s := range append(append([]Step(nil), c.Steps...), c.Probe) {
		for _, m := range victimFileRE.FindAllStringSubmatch(s.Tool, -1) {
			victim = append(victim, norm(m[1]))
		}
	}
	if c.VictimPlugin {
		victim = append(victim, "plugins")
	}
	slices.Sort(own)
	slices.Sort(victim)
	return slices.Compact(own), slices.Compact(victim)
}

var victimFileRE = regexp.MustCompile(`\{victim\}/\{([a-z_]+)\}`)

// HasProbe reports whether the chain has a probe.
func (c Chain) HasProbe() bool { return c.Probe.Tool != "" || c.Probe.Plugin != "" }

// ValidateChains checks a table: unique well-formed IDs, a known class,
// trigger and fault, both lines, an expected leak invariant, steps that
// are each one kind of action, templates that name only known
// placeholders (or one an earlier step saved), and the attacker's write
// canary in what the chain writes or says.
func ValidateChains(chains []Chain) error {
	var errs []error
	classes := map[ChainClass]bool{}
	for _, c := range ChainClasses {
		classes[c] = true
	}
	faults := map[string]bool{}
	for _, f := range ChainFaults {
		faults[f] = true
	}
	plugin := map[string]bool{ChainReadRow: true}
	for _, r := range Plugin() {
		plugin[r.ID] = true
	}
	seen := map[string]bool{}
	for i, c := range chains {
		name := fmt.Sprintf("chain %d (%q)", i, c.ID)
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
		}
		if !rowID.MatchString(c.ID) {
			bad("id: want lower-case words joined by '-'")
		}
		if seen[c.ID] {
			bad("id given twice")
		}
		seen[c.ID] = true
		if !classes[c.Class] {
			bad("class %q is unknown", c.Class)
		}
		switch c.Trigger {
		case OnTurn, OnSession, OnRPC, OnCron, OnRestart, OnCrash, OnNeighbourTurn, OnOperator:
		default:
			bad("trigger %q is unknown", c.Trigger)
		}
		if !faults[c.Fault] {
			bad("fault %q is not one of %v", c.Fault, ChainFaults)
		}
		if r, ok := invariants.Lookup(c.Expect); !ok || !r.Leak {
			bad("expected invariant %q is not a leak check", c.Expect)
		}
		for what, s := range map[string]string{"tries": c.Tries, "refusal": c.Refusal} {
			if strings.TrimSpace(s) == "" || strings.Contains(s, "\n") {
				bad("%s: want one non-empty line", what)
			}
		}
		if len(c.Steps) == 0 {
			bad("no step")
		}
		saved := map[string]bool{}
		var text []string
		check := func(where, s string) {
			text = append(text, s)
			if err := placeholder.Chain.With(slices.Collect(maps.Keys(saved))...).Check(s); err != nil {
				bad("%s: %v", where, err)
			}
		}
		steps := append(append([]Step(nil), c.Steps...), c.Undo...)
		if c.HasProbe() {
			steps = append(steps, c.Probe)
		}
		for j, s := range steps {
			where := fmt.Sprintf("step %d", j+1)
			kinds := 0
			for _, set := range []bool{s.Tool != "", s.Plugin != "", s.Op != ""} {
				if set {
					kinds++
				}
			}
			if kinds != 1 {
				bad("%s: want exactly one of a tool command, a plugin row or an RPC", where)
			}
			if s.Plugin != "" && !plugin[s.Plugin] {
				bad("%s: plugin row %q is not in Plugin()", where, s.Plugin)
			}
			check(where, s.Tool)
			for _, v := range s.Params {
				if str, ok := v.(string); ok {
					check(where, str)
				}
			}
			for k := range s.Save {
				saved[k] = true
			}
		}
		check("say", c.Say)
		for _, r := range c.Restore {
			check("restore", r)
		}
		if strings.Contains(c.OtherDefence, "\n") {
			bad("other defence: want one line")
		}
		if c.AlsoFault != "" && (c.OtherDefence == "" || !rowID.MatchString(c.AlsoFault)) {
			bad("also fault %q: want a fault's name, and the other defence it switches off", c.AlsoFault)
		}
		if c.OtherDefenceUnder != "" && (c.OtherDefence == "" || c.OtherDefenceUnder != "bwrap" && c.OtherDefenceUnder != "landlock") {
			bad("other defence under %q: want bwrap or landlock, and the other defence that sandbox gives", c.OtherDefenceUnder)
		}
		if c.ControlTest != "" && (c.OtherDefence == "" || c.AlsoFault != "") {
			bad("control test: only for a row another defence stops, with no fault to switch it off")
		}
		if l := c.HostLimit; l != nil && (l.Key == "" || l.Limit == "" || l.Value <= 0) {
			bad("host limit: want a key, the limit's name and a positive value")
		}
		if c.Class != Race && !strings.Contains(strings.Join(text, "\n"), "{write}") {
			bad("the chain writes or says nothing carrying the attacker's write canary ({write})")
		}
	}
	return errors.Join(errs...)
}

// ChainsOf lists the chains of chains in class c, in order.
func ChainsOf(chains []Chain, c ChainClass) []Chain {
	return only(chains, func(ch Chain) bool { return ch.Class == c })
}

// Places are what a chain's placeholders name for one attacker and one
// victim, as the harness knows them.
type Places struct {
	Write          string // the attacker's write canary
	Home           string // the attacker's home
	Victim         string // the victim's home
	VictimName     string
	OwnWorkdir     string
	VictimWorkdir  string
	WorkRoot       string // the folder of every workdir
	HomesParent    string // the folder of the named profiles' homes
	VictimProvider string // the victim's provider base URL
	Files          tenants.FileNames
}

// Vars are the placeholders' values.
func (p Places) Vars() map[string]string {
	v := map[string]string{
		"write": p.Write, "home": p.Home, "victim": p.Victim, "victim_name": p.VictimName,
		"own_workdir": p.OwnWorkdir, "victim_workdir": p.VictimWorkdir, "work_root": p.WorkRoot,
		"homes_parent": p.HomesParent, "victim_provider": p.VictimProvider,
	}
	for k, f := range fileNames(p.Files) {
		v[k] = f
	}
	if rel, err := filepath.Rel(filepath.Join(p.Home, p.Files.JobOutput), p.Victim); err == nil {
		v["victim_from_output"] = rel
	}
	if rel, err := filepath.Rel(p.Home, p.Victim); err == nil {
		v["victim_from_home"] = rel
	}
	v["victim_plugin"] = VictimPlugin
	return v
}

// Missing lists the needs (tenants.FileNames' yaml names) the layout does
// not name.
func (p Places) Missing(needs []string) []string {
	have := fileNames(p.Files)
	var out []string
	for _, n := range needs {
		if have[n] == "" {
			out = append(out, n)
		}
	}
	return out
}

func fileNames(f tenants.FileNames) map[string]string {
	return map[string]string{"config": f.Config, "env": f.Env, "soul": f.Soul, "memory": f.Memory, "jobs": f.Jobs,
		"job_output": f.JobOutput, "log": f.Log, "log_dir": f.LogDir, "state": f.State, "state_wal": f.StateWAL, "plugins": f.Plugins,
		"cache": f.Cache}
}
