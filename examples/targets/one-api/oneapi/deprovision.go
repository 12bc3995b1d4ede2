package oneapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// The deprovision steps the harness asks for, one per run of the
// deprovisioner (the gateway target's llm_gateway.deprovision).
const (
	StepDisable = "disable"
	StepDelete  = "delete"
)

// DeprovisionRequest is what the harness pipes to the deprovisioner
// (harness.DeprovisionRequest): the step, the tenant's name on the
// gateway, and the access the provisioner printed for it.
type DeprovisionRequest struct {
	Step   string `json:"step"`
	Tenant string `json:"tenant"`
	Access Access `json:"access"`
}

// ErrDeprovision wraps every reason a deprovision request is refused.
var ErrDeprovision = errors.New("not a deprovision request")

// DecodeDeprovision reads a deprovision request's JSON (from where, for
// errors): a known step, a tenant, and the numeric user and channel ids
// the provisioner printed.
func DecodeDeprovision(where string, data []byte) (DeprovisionRequest, error) {
	return decodeChecked("deprovision request "+where, ErrDeprovision, data, func(r DeprovisionRequest) (errs []error) {
		if r.Step != StepDisable && r.Step != StepDelete {
			errs = append(errs, fmt.Errorf("step %q, want %s or %s", r.Step, StepDisable, StepDelete))
		}
		if r.Tenant == "" {
			errs = append(errs, errors.New("no tenant"))
		}
		for _, id := range []string{"user", "channel"} {
			if _, err := strconv.Atoi(r.Access.IDs[id]); err != nil {
				errs = append(errs, fmt.Errorf("access.ids.%s %q: want the number the provisioner printed", id, r.Access.IDs[id]))
			}
		}
		return errs
	})
}

// UserByID reads a user by id (GET /api/user/ID; an administrator only).
func (c *Client) UserByID(ctx context.Context, id int) (User, error) {
	var u User
	if err := c.Call(ctx, http.MethodGet, "/api/user/"+strconv.Itoa(id), nil, &u); err != nil {
		return User{}, fmt.Errorf("user %d: %w", id, err)
	}
	if u.ID != id || u.Username == "" {
		return User{}, fmt.Errorf("user %d: the answer names user %d %q: %w", id, u.ID, u.Username, ErrRefused)
	}
	return u, nil
}

// ManageUser runs one of one-api's user actions (POST /api/user/manage:
// disable, enable, delete, promote, demote) on the user of that name; an
// administrator only. one-api's delete renames the user deleted_<uuid>
// and bans its id; its tokens and logs stay in the database.
func (c *Client) ManageUser(ctx context.Context, username, action string) error {
	if err := c.Call(ctx, http.MethodPost, "/api/user/manage", map[string]string{"username": username, "action": action}, nil); err != nil {
		return fmt.Errorf("%s user %s: %w", action, username, err)
	}
	return nil
}

// DeleteChannel deletes a channel (DELETE /api/channel/ID; an
// administrator only).
func (c *Client) DeleteChannel(ctx context.Context, id int) error {
	if err := c.Call(ctx, http.MethodDelete, "/api/channel/"+strconv.Itoa(id), nil, nil); err != nil {
		return fmt.Errorf("delete channel %d: %w", id, err)
	}
	return nil
}

// Deprovision offboards one tenant through the admin API with the root's
// access token. disable: its user is disabled (one-api then refuses its
// access token and its gateway tokens; its channel and data stay). delete:
// its user is deleted (renamed and banned), and its channel, which holds
// its upstream key and serves only its group, is deleted, so a tenant
// provisioned again under the same name gets a new user and channel. The
// user is found by the id the provisioner printed, so a successor that
// reuses the name is never the one offboarded.
func Deprovision(ctx context.Context, c *Client, r DeprovisionRequest) error {
	uid, err := strconv.Atoi(r.Access.IDs["user"])
	if err != nil {
		return fmt.Errorf("tenant %s: user id %q: %w", r.Tenant, r.Access.IDs["user"], ErrDeprovision)
	}
	u, err := c.UserByID(ctx, uid)
	if err != nil {
		return fmt.Errorf("tenant %s (%s): %w", r.Tenant, r.Step, err)
	}
	switch r.Step {
	case StepDisable:
		if err := c.ManageUser(ctx, u.Username, StepDisable); err != nil {
			return fmt.Errorf("tenant %s: %w", r.Tenant, err)
		}
	case StepDelete:
		if err := c.ManageUser(ctx, u.Username, StepDelete); err != nil {
			return fmt.Errorf("tenant %s: %w", r.Tenant, err)
		}
		ch, err := strconv.Atoi(r.Access.IDs["channel"])
		if err != nil {
			return fmt.Errorf("tenant %s: channel id %q: %w", r.Tenant, r.Access.IDs["channel"], ErrDeprovision)
		}
		if err := c.DeleteChannel(ctx, ch); err != nil {
			return fmt.Errorf("tenant %s: %w", r.Tenant, err)
		}
	default:
		return fmt.Errorf("tenant %s: step %q: %w", r.Tenant, r.Step, ErrDeprovision)
	}
	return nil
}
