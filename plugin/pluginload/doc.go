// Package pluginload finds plugin folders and runs a plugin's Go source with
// the yaegi interpreter in the calling process: the one place user code is
// interpreted. The plugin host child and the in-process loader both use it;
// nothing else should.
//
//	found, err := pluginload.Discover(filepath.Join(home, "plugins"), nil)
//	for _, f := range found {
//		err = pluginload.Load(f.Dir, myContext, os.Stderr)
//	}
package pluginload
