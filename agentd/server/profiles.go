package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

func (s *Server) profilesCreate(ctx context.Context, c *rpc.Call) (any, error) {
	p, err := operatorProfileCall(c)
	if err != nil {
		return nil, err
	}
	prof, err := s.createProfile(p.Name)
	switch {
	case errors.Is(err, profile.ErrBadName):
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "profiles.create: %v", err)
	case errors.Is(err, profile.ErrProfileExists):
		return nil, rpc.Errorf(rpc.CodeConflict, "profiles.create: profile %q already exists", p.Name)
	case err != nil:
		return nil, internalError("profiles.create: %v", err)
	}
	s.log.Info("profile created", "profile", prof.Name)
	s.clusterRevoke(ctx, prof.Name) // a name used before opens with its new key only
	return map[string]any{"ok": true, "name": prof.Name, "path": prof.Home}, nil
}

// profilesDelete deletes a named profile atomically (scope.Pool.Delete):
// its new requests are refused (4064) from the start, its sessions end
// (their end hooks run), its work in flight drains, then its home is
// renamed aside and removed.
func (s *Server) profilesDelete(ctx context.Context, c *rpc.Call) (any, error) {
	p, err := operatorProfileCall(c)
	if err != nil {
		return nil, err
	}
	if p.Name == "" || p.Name == profile.LaunchName {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "profiles.delete: the launch profile cannot be deleted")
	}
	if err := profile.ValidName(p.Name); err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "profiles.delete: %v", err)
	}
	if s.opts.Faults.Has(faults.DeleteRace) {
		return s.deleteRacing(p.Name)
	}
	err = s.pool.Delete(ctx, p.Name, func() {
		n := s.endSessionsOf(p.Name)
		s.log.Info("profile deleting: requests refused, sessions ended", "profile", p.Name, "sessions_closed", n)
	})
	switch {
	case errors.Is(err, profile.ErrUnknownProfile):
		return nil, rpc.Errorf(rpc.CodeUnknownProfile, "unknown profile %q", p.Name)
	case err != nil:
		return nil, internalError("profiles.delete: %v", err)
	}
	s.clusterRevoke(ctx, p.Name)
	s.clusterPurge(ctx, p.Name)
	s.log.Info("profile deleted", "profile", p.Name)
	return map[string]any{"ok": true, "name": p.Name}, nil
}

// endSessionsOf ends the live sessions of a profile (its shells and turns
// stop, its end hooks run) and returns how many there were.
func (s *Server) endSessionsOf(name string) int {
	s.mu.Lock()
	var gone []*Session
	for id, sess := range s.sessions {
		if sess.Scope.Profile.Name == name {
			gone = append(gone, sess)
			delete(s.sessions, id)
		}
	}
	s.mu.Unlock()
	closeSessions(gone, EndProfileDelete)
	return len(gone)
}

// deleteRacing is the delete of the delete-race fault: the home removed in
// place while the profile's requests go on (none is refused, none waited
// for), its scope closed after. A racing request re-makes the home as it
// is being removed (RemoveAll then fails: directory not empty) in about a
// fifth of the rounds of TestDeleteAndCreateAreAtomic; so that the
// positive control never depends on that timing, the fault also leaves
// the .env in place, as the racing model.save_key does when it wins.
func (s *Server) deleteRacing(name string) (any, error) {
	prof, err := s.opts.Homes.Get(name)
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeUnknownProfile, "unknown profile %q", name)
	}
	n := s.endSessionsOf(name)
	err = removeInPlace(prof.Home, ".env") // the bug
	s.pool.Drop(name)
	if err != nil {
		return nil, internalError("profiles.delete: delete profile %q: %v", name, err)
	}
	s.log.Info("profile deleted", "profile", name, "sessions_closed", n)
	return map[string]any{"ok": true, "name": name}, nil
}

// createProfile makes a profile home; under the create-copies-launch-env
// fault it also copies the launch profile's .env into it, and under the
// delete-race fault it reuses a folder left at the home's path.
func (s *Server) createProfile(name string) (profile.Profile, error) {
	var prof profile.Profile
	var err error
	if s.opts.Faults.Has(faults.DeleteRace) {
		prof, err = s.createReusing(name)
	} else {
		prof, err = s.opts.Homes.Create(name)
	}
	if err != nil || !s.opts.Faults.Has(faults.CreateCopiesLaunchEnv) {
		return prof, err
	}
	launch, err := s.opts.Homes.Get("")
	if err != nil {
		return prof, nil
	}
	if data, err := os.ReadFile(launch.File(".env")); err == nil {
		_ = os.WriteFile(prof.File(".env"), data, 0o600) // the bug
	}
	return prof, nil
}

// createReusing is the create of the delete-race fault: whatever a racing
// request left at the home's path becomes the new profile's.
func (s *Server) createReusing(name string) (profile.Profile, error) {
	dir, err := s.opts.Homes.Path(name)
	if err != nil || name == "" || name == profile.LaunchName {
		return profile.Profile{}, fmt.Errorf("create profile: %w", errors.Join(err, profile.ValidName(name)))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil { // the bug: the folder is reused
		return profile.Profile{}, fmt.Errorf("create profile %q: %w", name, err)
	}
	p := profile.Profile{Name: name, Home: dir, Managed: s.opts.Homes.Managed}
	return p, p.Skeleton()
}

func (s *Server) profilesList(ctx context.Context, c *rpc.Call) (any, error) {
	if err := c.Bind(&struct{}{}); err != nil {
		return nil, err
	}
	list, err := s.opts.Homes.List()
	if err != nil {
		return nil, internalError("profiles.list: %v", err)
	}
	names := make([]string, 0, len(list))
	for _, p := range list {
		if s.pool.Deleting(p.Name) {
			continue // refused already, gone soon
		}
		if own := boundTo(c.Conn); own == "" || own == p.Name {
			names = append(names, p.Name)
		}
	}
	return map[string]any{"profiles": names}, nil
}

// removeInPlace removes dir's entries but keep, then dir itself (which
// fails, directory not empty, when keep was there).
func removeInPlace(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(dir)
}

// profileName is the params of profiles.create and profiles.delete.
type profileName struct {
	Name string `json:"name"`
}

// operatorProfileCall reads a profiles.create or profiles.delete call:
// its params, once the caller is known to hold the operator token.
func operatorProfileCall(c *rpc.Call) (profileName, error) {
	var p profileName
	if err := c.Bind(&p); err != nil {
		return p, err
	}
	return p, operatorOnly(c)
}

// profilesRotateKey sets a profile's tenant credential (API_SERVER_KEY in
// its .env) to key, or removes it when key is empty (the tenant is
// disabled): operator only. The old key opens nothing from the reply on:
// the connections it opened are refused at their next call (their
// sessions end), on every replica of a cluster (the auth caches drop it
// before the reply).
func (s *Server) profilesRotateKey(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Name string `json:"name"`
		Key  string `json:"key"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	if err := operatorOnly(c); err != nil {
		return nil, err
	}
	sc, release, err := s.scopeFor(ctx, p.Name)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := sc.Profile.SetEnv(TenantKeyEnv, p.Key); err != nil {
		return nil, internalError("profiles.rotate_key: %v", err)
	}
	s.clusterRevoke(ctx, sc.Profile.Name)
	s.revokeLapsed(sc.Profile.Name) // this replica's connections, in a server of its own too
	s.log.Info("tenant key rotated", "profile", sc.Profile.Name, "removed", p.Key == "")
	return map[string]any{"ok": true, "name": sc.Profile.Name, "removed": p.Key == ""}, nil
}
