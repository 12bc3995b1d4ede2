//go:build !linux

package surface

import "errors"

type watcher struct{}

func newWatcher(map[string]string, func(Touch)) (*watcher, error) {
	return nil, errors.New("surface: watching homes needs Linux (inotify)")
}

func (w *watcher) watchHome(string, string) error { return nil }
func (w *watcher) state() (bool, error)           { return false, nil }
func (w *watcher) close()                         {}
