package surface

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"
)

// SampleEvery is how often a window samples the target's process tree: a
// process that lives shorter may be missed.
const SampleEvery = 20 * time.Millisecond

// Recorder records, one action at a time, what a target did to the
// watched homes and which processes it ran. It is safe for concurrent use;
// windows do not overlap (Begin waits for none: a second Begin before End
// is a programming error, refused).
type Recorder struct {
	vars     Vars
	w        *watcher
	sentinel string // a folder of the recorder's own, to flush the event queue

	mu    sync.Mutex
	cur   *window
	flush chan struct{}
}

// window is one action being recorded.
type window struct {
	act    Action
	files  map[string]*FileUse // tenant + "\x00" + path
	order  []string
	seen   map[identity]Proc
	stop   context.CancelFunc
	done   chan struct{}
	failed string
}

// NewRecorder watches homes (tenant -> home folder) and keeps tmp (a folder
// outside every home, the recorder's own) for its sentinel. vars are the
// tenants' variables to look for in processes' environments.
func NewRecorder(homes map[string]string, vars Vars, tmp string) (*Recorder, error) {
	sentinel, err := os.MkdirTemp(tmp, "surface-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("surface: sentinel folder: %w", err)
	}
	r := &Recorder{vars: vars, sentinel: sentinel}
	all := map[string]string{sentinelTenant: sentinel}
	for t, h := range homes {
		all[t] = h
	}
	w, err := newWatcher(all, r.touch)
	if err != nil {
		_ = os.RemoveAll(sentinel)
		return nil, err
	}
	r.w = w
	// The walk that set the watches opened every folder: let those events
	// pass before any window opens.
	flushed := make(chan struct{})
	r.mu.Lock()
	r.flush = flushed
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.drain(ctx, flushed); err != nil {
		r.Close()
		return nil, fmt.Errorf("surface: first flush: %w", err)
	}
	return r, nil
}

// drain makes a file in the sentinel folder and waits until its event is
// read (flushed closes): every event queued before it has been read then.
func (r *Recorder) drain(ctx context.Context, flushed chan struct{}) error {
	mark, err := os.CreateTemp(r.sentinel, "flush-")
	if err != nil {
		return err
	}
	_ = mark.Close()
	defer os.Remove(mark.Name())
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no event within the deadline: %w", ctx.Err())
	}
}

// sentinelTenant names the recorder's own folder among the watched ones.
const sentinelTenant = "\x00sentinel"

func (r *Recorder) touch(t Touch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.Tenant == sentinelTenant {
		if t.Op == Created && r.flush != nil {
			close(r.flush)
			r.flush = nil
		}
		return
	}
	w := r.cur
	if w == nil {
		return
	}
	k := t.Tenant + "\x00" + t.Path
	f := w.files[k]
	if f == nil {
		f = &FileUse{Tenant: t.Tenant, Path: t.Path, Dir: t.Dir}
		w.files[k] = f
		w.order = append(w.order, k)
	}
	if !slices.Contains(f.Ops, t.Op) {
		f.Ops = append(f.Ops, t.Op)
	}
}

// Watch adds tenant's home to the watched ones, whether or not it exists
// yet: a profile the server is about to create below a watched home is
// recorded as its own tenant's from the moment it appears.
func (r *Recorder) Watch(tenant, home string) error {
	if err := r.w.watchHome(tenant, home); err != nil {
		return fmt.Errorf("surface: watch %s's home: %w", tenant, err)
	}
	return nil
}

// Begin opens the window of one action: tenant's action name, with or
// without tools. roots gives the target's process roots (the server's
// pid first; it may change, as across a restart); nil records no
// processes.
func (r *Recorder) Begin(name, tenant string, tools bool, roots func() []int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		return fmt.Errorf("surface: begin %s while %s is open", name, r.cur.act.Name)
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &window{act: Action{Name: name, Tenant: tenant, Tools: tools}, files: map[string]*FileUse{},
		seen: map[identity]Proc{}, stop: stop, done: make(chan struct{})}
	r.cur = w
	go w.sample(ctx, roots, r.vars)
	return nil
}

// sample reads the process tree until ctx ends, and once more then.
func (w *window) sample(ctx context.Context, roots func() []int, vars Vars) {
	defer close(w.done)
	if roots == nil {
		return
	}
	tick := time.NewTicker(SampleEvery)
	defer tick.Stop()
	once := func() {
		rs := roots()
		if len(rs) == 0 || rs[0] <= 0 {
			return
		}
		ref, err := nsOf(rs[0])
		if err != nil {
			return // the server is between lives (a restart)
		}
		sampleTree(rs, ref, vars, w.seen)
	}
	for {
		once()
		select {
		case <-ctx.Done():
			once()
			return
		case <-tick.C:
		}
	}
}

// Fail notes that the action itself failed: the record may lack what it
// would have done.
func (r *Recorder) Fail(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		r.cur.failed = why
	}
}

// End closes the open window, once every event of the action has been
// read (a file made in the sentinel folder comes after them in inotify's
// queue), and returns what the action did.
func (r *Recorder) End(ctx context.Context) (Action, error) {
	r.mu.Lock()
	w := r.cur
	if w == nil {
		r.mu.Unlock()
		return Action{}, errors.New("surface: end with no window open")
	}
	flushed := make(chan struct{})
	r.flush = flushed
	r.mu.Unlock()
	w.stop()
	<-w.done

	var incomplete []string
	if err := r.drain(ctx, flushed); err != nil {
		incomplete = append(incomplete, "events after the action not flushed: "+err.Error())
	}

	r.mu.Lock()
	r.cur, r.flush = nil, nil
	r.mu.Unlock()
	if overflow, werr := r.w.state(); overflow || werr != nil {
		incomplete = append(incomplete, fmt.Sprintf("inotify lost events (overflow %v, error %v)", overflow, werr))
	}
	if w.failed != "" {
		incomplete = append(incomplete, "the action failed: "+w.failed)
	}
	act := w.act
	for _, k := range w.order {
		f := *w.files[k]
		sort.Slice(f.Ops, func(i, j int) bool { return opRank(f.Ops[i]) < opRank(f.Ops[j]) })
		act.Files = append(act.Files, f)
	}
	for _, p := range w.seen {
		act.Procs = append(act.Procs, p)
	}
	sort.Slice(act.Procs, func(i, j int) bool { return act.Procs[i].PID < act.Procs[j].PID })
	if len(incomplete) > 0 {
		act.Incomplete = fmt.Sprint(incomplete)
	}
	return act, nil
}

func opRank(o Op) int {
	return slices.Index([]Op{Opened, Read, Written, Created, Deleted, Renamed, Attrib}, o)
}

// Close stops watching and removes the recorder's own folder.
func (r *Recorder) Close() {
	r.mu.Lock()
	w := r.cur
	r.cur = nil
	r.mu.Unlock()
	if w != nil {
		w.stop()
		<-w.done
	}
	r.w.close()
	_ = os.RemoveAll(r.sentinel)
}
