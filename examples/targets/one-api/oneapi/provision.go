package oneapi

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Roster is the part of a tenantcanary roster (tenants.Roster, the JSON
// `canary-run fakellm` writes and the harness pipes to a provisioner) that
// provisioning reads. This module builds one-api with one-api's own
// dependency versions, so it reads the JSON rather than importing the
// harness (whose newer dependencies would change one-api's build).
type Roster struct {
	Version int            `json:"version"`
	Tenants []RosterTenant `json:"tenants"`
}

// RosterTenant is one tenant: its name, its own provider's OpenAI base URL
// (http://HOST:PORT/v1), the key that provider accepts, and its model.
type RosterTenant struct {
	Name    string `json:"name"`
	BaseURL string `json:"base_url"`
	Key     string `json:"key"`
	Model   string `json:"model"`
}

// ErrRoster wraps every reason a roster is refused.
var ErrRoster = errors.New("not a tenant roster")

// DecodeRoster reads a roster's JSON (from where, for errors): version 1,
// at least one tenant, each with a name, base URL, key and model, names
// unique and valid one-api group names.
func DecodeRoster(where string, data []byte) (Roster, error) {
	return decodeChecked("roster "+where, ErrRoster, data, func(r Roster) (errs []error) {
		if r.Version != 1 {
			errs = append(errs, fmt.Errorf("version %d, want 1", r.Version))
		}
		if len(r.Tenants) == 0 {
			errs = append(errs, errors.New("no tenant"))
		}
		seen := map[string]bool{}
		for i, t := range r.Tenants {
			switch {
			case t.Name == "" || t.BaseURL == "" || t.Key == "" || t.Model == "":
				errs = append(errs, fmt.Errorf("tenant %d (%q): want name, base_url, key and model", i, t.Name))
			case strings.ContainsAny(t.Name, ", \t\n"):
				errs = append(errs, fmt.Errorf("tenant %q: a comma or space cannot be in a one-api group name", t.Name))
			case seen[t.Name]:
				errs = append(errs, fmt.Errorf("tenant %q listed twice", t.Name))
			}
			seen[t.Name] = true
		}
		return errs
	})
}

// decodeChecked reads data's JSON into a T and has check list what is
// wrong with it: a JSON error or check's reasons come back as
// "what: refusal: reasons", the T as far as it was read.
func decodeChecked[T any](what string, refusal error, data []byte, check func(T) []error) (T, error) {
	var r T
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w: %w", what, refusal, err)
	}
	if err := errors.Join(check(r)...); err != nil {
		return r, fmt.Errorf("%s: %w: %w", what, refusal, err)
	}
	return r, nil
}

// Provisioned is the provisioner's stdout, the gateway target's contract
// (harness.Provisioned): per tenant its gateway key, models, OpenAI base
// path, management credentials and the identifiers it owns.
type Provisioned struct {
	Tenants map[string]Access `json:"tenants"`
}

// Access is one tenant's way into one-api.
type Access struct {
	Key      string            `json:"key"`       // the gateway token (bare, as one-api stores it in tokens.key)
	Models   []string          `json:"models"`    // the tenant's own upstream model
	BasePath string            `json:"base_path"` // /v1
	Headers  map[string]string `json:"headers"`   // Authorization: the user's access token (management API)
	IDs      map[string]string `json:"ids"`       // user, token, channel
}

// TenantQuota is every tenant user's quota: far more than a certification
// spends (one-api's default quota for a new user is 0, which refuses every
// relay).
const TenantQuota = 1_000_000_000_000

// Provision first closes what a fresh one-api leaves open to anyone who can
// reach it (the root's password is 123456, printed in its log; anyone may
// register a user): it sets the root's password to a random one it
// forgets (the root's access token stays the operator's credential) and
// turns registration off. Then it makes every tenant of r in the instance
// c reaches with the root's access token: its group (ratio 1), a user in that group, an
// OpenAI-type channel serving only that group with the tenant's model, its
// own provider's base URL and key, and a gateway token of that user.
func Provision(ctx context.Context, c *Client, r Roster) (Provisioned, error) {
	return ProvisionWith(ctx, c, r, Options{})
}

// Options are what a provisioning turns on beyond the tenants themselves.
type Options struct {
	// RetryTimes, when above 0, turns on one-api's own retries (the
	// option RetryTimes: a relay that fails with 429 or 5xx is tried again
	// on another channel of the user's group serving the model) and gives
	// every tenant a fallback channel, a second channel of its group to
	// its own provider with its own key and model, for the retries to
	// fail over to: what a deployment with retries runs. The harness asks
	// for it with RETRIES=1 (gateway-failover).
	RetryTimes int
}

// DefaultRetryTimes is RetryTimes when the harness asks for retries. A
// retry that draws the channel that just failed is spent without a call
// (one-api's relay skips it), and it draws at random among the group's
// channels, so a few are needed for the fallback to be reached.
const DefaultRetryTimes = 3

// ProvisionWith is Provision with opts: with RetryTimes, the option is
// set and read back (a setting one-api dropped fails the provisioning),
// and each tenant gets a fallback channel (ids.fallback_channel).
func ProvisionWith(ctx context.Context, c *Client, r Roster, opts Options) (Provisioned, error) {
	out := Provisioned{Tenants: map[string]Access{}}
	if opts.RetryTimes < 0 {
		return out, fmt.Errorf("retry times %d: want 0 (off) or more", opts.RetryTimes)
	}
	rootPassword, err := randomHex(10)
	if err != nil {
		return out, err
	}
	if err := c.SetPassword(ctx, rootPassword); err != nil {
		return out, fmt.Errorf("root: %w", err)
	}
	for _, key := range []string{"RegisterEnabled", "PasswordRegisterEnabled"} {
		if err := c.SetOption(ctx, key, "false"); err != nil {
			return out, err
		}
	}
	groups := make([]string, 0, len(r.Tenants))
	for _, t := range r.Tenants {
		groups = append(groups, Group(t.Name))
	}
	if err := c.SetGroupRatios(ctx, groups); err != nil {
		return out, err
	}
	if err := setRetries(ctx, c, opts.RetryTimes); err != nil {
		return out, err
	}
	for _, t := range r.Tenants {
		a, err := provisionTenant(ctx, c, t, opts.RetryTimes > 0)
		if err != nil {
			return out, fmt.Errorf("tenant %s: %w", t.Name, err)
		}
		out.Tenants[t.Name] = a
	}
	return out, nil
}

// setRetries sets the option RetryTimes to n and reads it back.
func setRetries(ctx context.Context, c *Client, n int) error {
	want := strconv.Itoa(n)
	if err := c.SetOption(ctx, "RetryTimes", want); err != nil {
		return err
	}
	var opts []Option
	if err := c.Call(ctx, http.MethodGet, "/api/option/", nil, &opts); err != nil {
		return fmt.Errorf("read option RetryTimes back: %w", err)
	}
	for _, o := range opts {
		if o.Key == "RetryTimes" {
			if o.Value != want {
				return fmt.Errorf("option RetryTimes is %q after setting it to %s: %w", o.Value, want, ErrRefused)
			}
			return nil
		}
	}
	return fmt.Errorf("option RetryTimes: one-api lists no such option after setting it: %w", ErrRefused)
}

func provisionTenant(ctx context.Context, c *Client, t RosterTenant, fallback bool) (Access, error) {
	password, err := randomHex(8)
	if err != nil {
		return Access{}, err
	}
	u, err := c.CreateUser(ctx, Username(t.Name), password)
	if err != nil {
		return Access{}, err
	}
	if u.AccessToken == "" {
		return Access{}, fmt.Errorf("user %s: the admin API shows no access token: %w", u.Username, ErrRefused)
	}
	u.Group, u.Quota = Group(t.Name), TenantQuota
	if err := c.UpdateUser(ctx, u); err != nil {
		return Access{}, err
	}
	base := UpstreamBase(t.BaseURL)
	chID, err := c.AddChannel(ctx, Channel{
		Type: ChannelTypeOpenAI, Name: "tc-" + t.Name, Key: t.Key, BaseURL: &base,
		Models: t.Model, Group: Group(t.Name),
	})
	if err != nil {
		return Access{}, err
	}
	ids := map[string]string{
		"user": strconv.Itoa(u.ID), "channel": strconv.Itoa(chID), "group": Group(t.Name),
	}
	if fallback {
		fbID, err := c.AddChannel(ctx, Channel{
			Type: ChannelTypeOpenAI, Name: "tc-" + t.Name + "-fallback", Key: t.Key, BaseURL: &base,
			Models: t.Model, Group: Group(t.Name),
		})
		if err != nil {
			return Access{}, fmt.Errorf("fallback channel: %w", err)
		}
		ids["fallback_channel"] = strconv.Itoa(fbID)
	}
	tok, err := c.As(u.AccessToken).AddToken(ctx, "tc-"+t.Name)
	if err != nil {
		return Access{}, err
	}
	if tok.UserID != u.ID {
		return Access{}, fmt.Errorf("token %d belongs to user %d, not %s's %d: %w", tok.ID, tok.UserID, u.Username, u.ID, ErrRefused)
	}
	// one-api gives every new user a token named "default": gone, so the
	// token reported is the only one the tenant owns (a token id the
	// harness does not know of would look like another tenant's).
	if err := keepOnly(ctx, c.As(u.AccessToken), tok.ID); err != nil {
		return Access{}, err
	}
	ids["token"] = strconv.Itoa(tok.ID)
	return Access{
		Key: tok.Key, Models: []string{t.Model}, BasePath: "/v1",
		Headers: map[string]string{"Authorization": u.AccessToken},
		IDs:     ids,
	}, nil
}

// keepOnly deletes every token of c's user but id.
func keepOnly(ctx context.Context, c *Client, id int) error {
	ts, err := c.Tokens(ctx)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.ID != id {
			if err := c.DeleteToken(ctx, t.ID); err != nil {
				return err
			}
		}
	}
	ts, err = c.Tokens(ctx)
	if err != nil {
		return err
	}
	if len(ts) != 1 || ts[0].ID != id {
		return fmt.Errorf("the user keeps %d tokens after the clean-up, want only %d: %w", len(ts), id, ErrRefused)
	}
	return nil
}

// Group is the one-api group of a tenant: tc-<name>. No two tenants share
// one, and none is one-api's own (default, vip, svip: a user made another
// way lands in default), so a channel serving a group serves one tenant.
func Group(tenant string) string { return "tc-" + tenant }

// Username is the one-api user name of a tenant: its name when it fits
// one-api's 12 characters, else its first 7 characters, a hyphen and 4 hex
// digits of its SHA-1 (distinct names stay distinct in practice, and the
// same name always maps to the same user).
func Username(tenant string) string {
	if len(tenant) <= 12 {
		return tenant
	}
	sum := sha1.Sum([]byte(tenant))
	return tenant[:7] + "-" + hex.EncodeToString(sum[:2])
}

// UpstreamBase is the channel base_url for a provider whose OpenAI base URL
// is baseURL: one-api appends the request's whole path (/v1/chat/completions),
// so a trailing /v1 comes off.
func UpstreamBase(baseURL string) string {
	return strings.TrimSuffix(strings.TrimSuffix(baseURL, "/"), "/v1")
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random password: %w", err)
	}
	return hex.EncodeToString(b), nil
}
