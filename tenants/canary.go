package tenants

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// Kind names what a canary stands for.
type Kind string

// The canary kinds every tenant owns from the start, and SavedKey, minted
// when a run saves a key through the target.
const (
	ProviderKey  Kind = "provider_key"
	APIServerKey Kind = "api_server_key"
	EnvMarker    Kind = "env_marker"
	Model        Kind = "model"
	Memory       Kind = "memory"
	Soul         Kind = "soul"
	Workdir      Kind = "workdir"
	CronPrompt   Kind = "cron_prompt"
	ShellState   Kind = "shell_state"
	EnvName      Kind = "env_name"
	// Reply rides in every answer the tenant's provider gives (its text,
	// its tool-call ids): an answer that reaches another tenant shows as a
	// foreign canary there.
	Reply    Kind = "reply"
	SavedKey Kind = "saved_key"
	// GatewayKey and GatewayCredential are what a gateway's provisioner
	// minted for the tenant (its gateway key, its management API's
	// credentials): adopted mid-run (Tenant.Adopt).
	GatewayKey        Kind = "gateway_key"
	GatewayCredential Kind = "gateway_credential"
)

// BaseKinds are the kinds every tenant owns from the moment it is built, in
// a fixed order.
var BaseKinds = []Kind{ProviderKey, APIServerKey, EnvMarker, Model, Memory, Soul, Workdir, CronPrompt, ShellState, EnvName, Reply}

// Secret reports whether a canary of this kind is a credential: the kinds a
// log may never show even for its own tenant.
func (k Kind) Secret() bool {
	return k == ProviderKey || k == APIServerKey || k == SavedKey || k == GatewayKey || k == GatewayCredential
}

// Canary is one planted value and who owns it.
type Canary struct {
	Owner string `json:"owner"`
	Kind  Kind   `json:"kind"`
	Value string `json:"value"`
}

var (
	nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	kindRE = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
)

// ValidName reports whether name can name a tenant: lower-case letters,
// digits and inner hyphens, starting with a letter, at most 32 bytes, so
// that every canary built from it stays in the alphabet [a-z0-9-].
func ValidName(name string) error {
	if len(name) == 0 || len(name) > 32 || !nameRE.MatchString(name) {
		return fmt.Errorf("tenant name %q: want [a-z][a-z0-9]* with inner hyphens, at most 32 bytes", name)
	}
	return nil
}

// NewTag returns 10 random lower-case hex digits from crypto/rand.
func NewTag() (string, error) {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("read random tag: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// CanaryValue renders the canary of kind for tenant with tag:
// <kind with '-' for '_'>-<tenant>-<tag>, or CANARY_<TENANT>_<TAG> for
// EnvName.
func CanaryValue(kind Kind, tenant, tag string) string {
	if kind == EnvName {
		return "CANARY_" + strings.ToUpper(strings.ReplaceAll(tenant, "-", "_")) + "_" + strings.ToUpper(tag)
	}
	return strings.ReplaceAll(string(kind), "_", "-") + "-" + tenant + "-" + tag
}
