package server

import (
	"crypto/sha256"
	"crypto/subtle"

	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// TenantKeyEnv is the .env variable holding a profile's tenant credential:
// the same API_SERVER_KEY its gateway route takes. A websocket connection
// opened with it (`/api/ws?token=<key>`) is bound to that profile.
const TenantKeyEnv = "API_SERVER_KEY"

// TenantOf names the profile whose tenant credential token is, comparing
// with every profile's in constant time; ok is false when none holds it.
// Each profile's credential comes from the server's key cache, which
// reads a .env again only when its identity changed (see keyCache): a
// key saved or a profile deleted takes effect at the next connection,
// and a connect costs one open and fstat of each profile's .env, never a
// read of one that did not change, so no tenant's .env (a FIFO, a huge
// file, one rewritten constantly) slows another tenant's connect.
func (s *Server) TenantOf(token string) (name string, ok bool) {
	if token == "" {
		return "", false
	}
	list, err := s.opts.Homes.List()
	if err != nil {
		return "", false
	}
	given := sha256.Sum256([]byte(token))
	for _, p := range list {
		sum, found, err := s.tenantKey(p)
		if err == nil && found && subtle.ConstantTimeCompare(sum[:], given[:]) == 1 {
			name, ok = p.Name, true
		}
	}
	return name, ok
}

// tenantBound is a connection a tenant credential opened.
type tenantBound interface {
	Tenant() string
	Credential() string
}

// boundTo is the profile conn is bound to, or "" for an operator
// connection (the operator token, a stdio backend).
func boundTo(conn rpc.Conn) string {
	if b, ok := conn.(tenantBound); ok {
		return b.Tenant()
	}
	return ""
}

// profileFor resolves the profile a call names: any profile for an
// operator connection; for a tenant connection only its own ("" is its
// own), anything else refused with 4030 and no detail of the other.
func (s *Server) profileFor(c *rpc.Call, name string) (string, error) {
	own := boundTo(c.Conn)
	if own == "" {
		return name, nil
	}
	if !s.credentialHolds(c.Conn, own) {
		return "", rpc.Errorf(rpc.CodeForbidden, "%s: this connection's credential no longer opens its profile (deleted, re-created or rotated): reconnect", c.Method)
	}
	if name == "" || name == own || (own == profile.LaunchName && name == profile.LaunchName) {
		return own, nil
	}
	return "", rpc.Errorf(rpc.CodeForbidden, "%s: this connection may address only its own profile", c.Method)
}

// credentialHolds reports whether conn's tenant credential is still the
// API_SERVER_KEY of its profile own.
func (s *Server) credentialHolds(conn rpc.Conn, own string) bool {
	b, ok := conn.(tenantBound)
	if !ok {
		return false
	}
	p, err := s.opts.Homes.Get(own)
	if err != nil {
		return false
	}
	return s.credentialOf(b, p)
}

// credentialOpens reports whether conn's tenant credential is the
// API_SERVER_KEY of p, the home a call holds (p.Name must be conn's own).
func (s *Server) credentialOpens(conn rpc.Conn, p profile.Profile) bool {
	b, ok := conn.(tenantBound)
	return ok && b.Tenant() == p.Name && s.credentialOf(b, p)
}

// credentialOf reports whether b's credential is p's API_SERVER_KEY (read
// through the server's key cache).
func (s *Server) credentialOf(b tenantBound, p profile.Profile) bool {
	sum, found, err := s.tenantKey(p)
	if err != nil || !found {
		return false
	}
	given := sha256.Sum256([]byte(b.Credential()))
	return subtle.ConstantTimeCompare(sum[:], given[:]) == 1
}

// checkName refuses a profile name a call gives that cannot be one,
// before it meets a path: 4064 like any unknown profile, saying why. ""
// and the launch name are the launch profile.
func checkName(name string) error {
	if name == "" || name == profile.LaunchName {
		return nil
	}
	if err := profile.ValidName(name); err != nil {
		return rpc.Errorf(rpc.CodeUnknownProfile, "unknown profile: %v", err)
	}
	return nil
}

// operatorOnly refuses a tenant connection a method only the operator
// token may call (creating and deleting profiles).
func operatorOnly(c *rpc.Call) error {
	if boundTo(c.Conn) != "" {
		return rpc.Errorf(rpc.CodeForbidden, "%s: needs the operator token", c.Method)
	}
	return nil
}
