package surface

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Op is what happened to a path of a home.
type Op string

// The operations inotify tells apart.
const (
	Opened  Op = "opened"
	Read    Op = "read"
	Written Op = "written"
	Created Op = "created"
	Deleted Op = "deleted"
	Renamed Op = "renamed"
	Attrib  Op = "attrib"
)

// Touch is one event on a home: whose, which path (relative to the home,
// "" for the home itself), what happened, and whether it is a folder.
type Touch struct {
	Tenant string
	Path   string
	Op     Op
	Dir    bool
}

// FileUse is everything an action did to one path of one tenant's home.
type FileUse struct {
	Tenant string `json:"tenant"`
	Path   string `json:"path"`
	Dir    bool   `json:"dir,omitempty"`
	Ops    []Op   `json:"ops"`
	// Attacks names the generated attacks aimed at this path.
	Attacks []string `json:"attacks,omitempty"`
}

// Reads reports whether the action opened or read the path without
// making it: the server consumed what the tenant left there.
func (f FileUse) Reads() bool {
	return !slices.Contains(f.Ops, Created) && (slices.Contains(f.Ops, Read) || slices.Contains(f.Ops, Opened))
}

// Carried is a tenant's variable found in a process's environment.
type Carried struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
}

// Proc is one process of the target's tree seen while an action ran.
type Proc struct {
	PID     int      `json:"pid"`
	Parent  int      `json:"ppid"`
	Program string   `json:"program"`
	Argv    []string `json:"argv,omitempty"` // its first words, shortened
	// Server: a root of the tree, a command of the target the harness
	// started itself (the server, a cron tick): outside every sandbox by
	// design, and judged only by the variables it carries.
	Server bool `json:"server,omitempty"`
	// Confined: it runs in namespaces of its own or with no_new_privs;
	// How says which, or why it counts as outside every sandbox.
	Confined bool   `json:"confined"`
	How      string `json:"how"`
	// Carries lists the tenant variables in its environment.
	Carries []Carried `json:"carries,omitempty"`
	// Unreadable says why its environment could not be read.
	Unreadable string   `json:"unreadable,omitempty"`
	Attacks    []string `json:"attacks,omitempty"`
	env        []string // its environment, for the invariant's scan; never serialised
}

// Env is the environment the process had when it was seen (NAME=VALUE).
func (p Proc) Env() []string { return p.env }

// Action is what one action of one tenant did on the surface.
type Action struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	// Tools: a tool ran in the action (the tenant's own sandboxed shell may
	// have made some of the file events); false: only the server acted.
	Tools bool      `json:"tools"`
	Files []FileUse `json:"files,omitempty"`
	Procs []Proc    `json:"procs,omitempty"`
	// Incomplete says what the record may lack (events lost, a failed
	// action).
	Incomplete string `json:"incomplete,omitempty"`
}

// Unconfined lists the action's processes outside every sandbox but the
// server itself.
func (a Action) Unconfined() []Proc {
	var out []Proc
	for _, p := range a.Procs {
		if !p.Confined && !p.Server {
			out = append(out, p)
		}
	}
	return out
}

// ServerReads lists the paths of a's own tenant (of every tenant, for an
// action of none: a restart) that the server itself read in a (an action
// in which no tool ran), folders apart.
func (a Action) ServerReads() []FileUse {
	if a.Tools {
		return nil
	}
	var out []FileUse
	for _, f := range a.Files {
		if (a.Tenant == "" || f.Tenant == a.Tenant) && f.Path != "" && f.Reads() {
			out = append(out, f)
		}
	}
	return out
}

// Map is the surface a discovery pass learned: one Action per action
// driven, in order, and what the pass could not see.
type Map struct {
	Actions []Action `json:"actions"`
	Blind   []string `json:"blind,omitempty"`
}

// Aim records that attack was aimed at path of tenant in every action
// that touched it.
func (m *Map) Aim(tenant, path, attack string) {
	for i := range m.Actions {
		for j := range m.Actions[i].Files {
			f := &m.Actions[i].Files[j]
			if f.Tenant == tenant && f.Path == path && !slices.Contains(f.Attacks, attack) {
				f.Attacks = append(f.Attacks, attack)
			}
		}
	}
}

// AimProcs records that attack was aimed at the unconfined processes of
// the actions named action.
func (m *Map) AimProcs(action, attack string) {
	for i := range m.Actions {
		if m.Actions[i].Name != action {
			continue
		}
		for j := range m.Actions[i].Procs {
			p := &m.Actions[i].Procs[j]
			if !p.Confined && !p.Server && !slices.Contains(p.Attacks, attack) {
				p.Attacks = append(p.Attacks, attack)
			}
		}
	}
}

// Row is one line of the surface table: an action and what it touched
// (paths by kind of use, processes by confinement).
type Row struct {
	Action     string
	Reads      []string // paths the server read (only the server acted)
	Writes     []string // paths written, made, renamed or deleted
	Unconfined []string // processes outside every sandbox (program: tenant variables)
	Confined   []string // confined processes' programs
	Attacks    int      // attacks aimed at this action's points
}

// randomPart is a run of hex digits long enough to be random (a temp
// file's suffix): the table names such files once, with a star.
var randomPart = regexp.MustCompile(`[0-9a-f]{8,}`)

// Rows folds the map into one row per action name (tenants merged, paths
// of every tenant alike), in the order actions were first driven.
func (m *Map) Rows() []Row {
	var order []string
	by := map[string]*rowSets{}
	for _, a := range m.Actions {
		rs := by[a.Name]
		if rs == nil {
			rs = newRowSets()
			by[a.Name] = rs
			order = append(order, a.Name)
		}
		if a.Incomplete != "" {
			rs.incomplete++
		}
		for _, f := range a.Files {
			if (a.Tenant != "" && f.Tenant != a.Tenant) || f.Path == "" {
				continue
			}
			p := randomPart.ReplaceAllString(f.Path, "*")
			if f.Dir {
				p += "/"
			}
			if !a.Tools && f.Reads() {
				rs.reads[p] = true
			}
			if slices.ContainsFunc(f.Ops, func(o Op) bool { return o != Opened && o != Read && o != Attrib }) {
				rs.writes[p] = true
			}
			rs.attacks += len(f.Attacks)
		}
		for _, p := range a.Procs {
			if p.Server {
				continue
			}
			rs.attacks += len(p.Attacks)
			if p.Confined {
				rs.confined[p.Program] = true
				continue
			}
			w := p.Program
			if len(p.Carries) > 0 {
				w += ": " + carriedNames(p.Carries)
			}
			rs.unconfined[w] = true
		}
	}
	rows := make([]Row, 0, len(order))
	for _, name := range order {
		rs := by[name]
		if rs.incomplete > 0 {
			name += fmt.Sprintf(" (incomplete %d times)", rs.incomplete)
		}
		rows = append(rows, Row{Action: name, Reads: keys(rs.reads), Writes: keys(rs.writes),
			Unconfined: keys(rs.unconfined), Confined: keys(rs.confined), Attacks: rs.attacks})
	}
	return rows
}

type rowSets struct {
	reads, writes, unconfined, confined map[string]bool
	attacks, incomplete                 int
}

func newRowSets() *rowSets {
	return &rowSets{reads: map[string]bool{}, writes: map[string]bool{}, unconfined: map[string]bool{}, confined: map[string]bool{}}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func carriedNames(cs []Carried) string {
	names := map[string]bool{}
	for _, c := range cs {
		names[c.Name] = true
	}
	return strings.Join(keys(names), ", ")
}

// WriteTable writes the map as a Markdown table: per action, what the
// server read and wrote of the acting tenant's home, and the processes it
// started, outside and inside a sandbox.
func (m *Map) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintln(w, "| action | server reads | writes | outside every sandbox | confined | attacks |\n|---|---|---|---|---|---|"); err != nil {
		return err
	}
	for _, r := range m.Rows() {
		if _, err := fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n", r.Action, cell(r.Reads), cell(r.Writes),
			cell(r.Unconfined), cell(r.Confined), r.Attacks); err != nil {
			return err
		}
	}
	for _, b := range m.Blind {
		if _, err := fmt.Fprintf(w, "\nNot seen: %s\n", b); err != nil {
			return err
		}
	}
	return nil
}

// cell joins words for a table cell, at most 6 of them.
func cell(ws []string) string {
	if len(ws) == 0 {
		return "-"
	}
	if len(ws) > 6 {
		return fmt.Sprintf("%s (+%d)", strings.Join(escape(ws[:6]), ", "), len(ws)-6)
	}
	return strings.Join(escape(ws), ", ")
}

func escape(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = "`" + strings.ReplaceAll(w, "|", "\\|") + "`"
	}
	return out
}
