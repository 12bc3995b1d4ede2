// Package oneapi drives the management API of one-api
// (github.com/songquanpeng/one-api, v0.6.10) to provision tenantcanary's
// tenants in one pooled instance: per tenant a user in a group of its own,
// a channel to the tenant's own upstream provider with the tenant's own
// key, a gateway token, and the user's access token for the management API.
//
//	c := oneapi.NewClient("http://127.0.0.1:3000", rootToken)
//	out, err := oneapi.Provision(ctx, c, roster)
//
// Every call names the route it made and one-api's message when refused:
// one-api answers most refusals with HTTP 200 and {"success": false}.
package oneapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ErrRefused wraps every answer of one-api that is not a success.
var ErrRefused = errors.New("one-api refused")

// Client calls one-api's management API (/api/...) with one credential:
// an access token, sent as the bare Authorization header value, as
// one-api's UserAuth/AdminAuth/RootAuth middlewares read it.
type Client struct {
	URL   string // base URL, http://127.0.0.1:PORT (loopback: one-api binds every interface)
	Token string // access token (the root's INITIAL_ROOT_ACCESS_TOKEN, or a user's)
	HTTP  *http.Client
}

// NewClient returns a client of the instance at url with access token.
func NewClient(url, token string) *Client {
	return &Client{URL: url, Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// As returns a client of the same instance with another access token.
func (c *Client) As(token string) *Client {
	cp := *c
	cp.Token = token
	return &cp
}

// envelope is one-api's answer to every management call.
type envelope struct {
	Success bool            `json:"success"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// Call sends method path with body (marshalled as JSON when not nil) and
// decodes the answer's data into out (when not nil). A non-2xx status or
// success false is an error wrapping ErrRefused.
func (c *Client) Call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: HTTP %d, not one-api's JSON envelope: %.200q: %w", method, path, resp.StatusCode, raw, ErrRefused)
	}
	if resp.StatusCode/100 != 2 || !env.Success {
		return fmt.Errorf("%s %s: HTTP %d: %q: %w", method, path, resp.StatusCode, env.Message, ErrRefused)
	}
	if out != nil && len(env.Data) > 0 {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return fmt.Errorf("%s %s: decode data: %w", method, path, err)
		}
	}
	return nil
}

// Option is one row of one-api's options table.
type Option struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// SetGroupRatios adds groups (each with ratio 1) to the GroupRatio option,
// keeping the groups already there: one-api bills a user by its group's
// ratio, and a channel serves only the groups it lists.
func (c *Client) SetGroupRatios(ctx context.Context, groups []string) error {
	var opts []Option
	if err := c.Call(ctx, http.MethodGet, "/api/option/", nil, &opts); err != nil {
		return fmt.Errorf("group ratios: %w", err)
	}
	ratios := map[string]float64{}
	for _, o := range opts {
		if o.Key == "GroupRatio" && o.Value != "" {
			if err := json.Unmarshal([]byte(o.Value), &ratios); err != nil {
				return fmt.Errorf("group ratios: option GroupRatio %q: %w", o.Value, err)
			}
		}
	}
	for _, g := range groups {
		if _, ok := ratios[g]; !ok {
			ratios[g] = 1
		}
	}
	value, err := json.Marshal(ratios)
	if err != nil {
		return fmt.Errorf("group ratios: %w", err)
	}
	if err := c.Call(ctx, http.MethodPut, "/api/option/", Option{Key: "GroupRatio", Value: string(value)}, nil); err != nil {
		return fmt.Errorf("group ratios: %w", err)
	}
	return nil
}

// SetOption writes one option (PUT /api/option/; the root only).
func (c *Client) SetOption(ctx context.Context, key, value string) error {
	if err := c.Call(ctx, http.MethodPut, "/api/option/", Option{Key: key, Value: value}, nil); err != nil {
		return fmt.Errorf("option %s: %w", key, err)
	}
	return nil
}

// SetPassword sets the client's own user's password (PUT /api/user/self).
func (c *Client) SetPassword(ctx context.Context, password string) error {
	if err := c.Call(ctx, http.MethodPut, "/api/user/self", User{Password: password}, nil); err != nil {
		return fmt.Errorf("set own password: %w", err)
	}
	return nil
}

// User is the part of one-api's user record the provisioner reads and
// writes (the admin API omits only the password).
type User struct {
	ID          int    `json:"id"`
	Username    string `json:"username"`
	Password    string `json:"password,omitempty"`
	DisplayName string `json:"display_name,omitempty"`
	Group       string `json:"group,omitempty"`
	Quota       int64  `json:"quota,omitempty"`
	AccessToken string `json:"access_token,omitempty"`
}

// CreateUser creates a common user (POST /api/user/, which answers no id)
// and returns it as the admin search reads it back, access token included.
func (c *Client) CreateUser(ctx context.Context, username, password string) (User, error) {
	if err := c.Call(ctx, http.MethodPost, "/api/user/", User{Username: username, Password: password, DisplayName: username}, nil); err != nil {
		return User{}, fmt.Errorf("create user %s: %w", username, err)
	}
	var found []User
	if err := c.Call(ctx, http.MethodGet, "/api/user/search?keyword="+url.QueryEscape(username), nil, &found); err != nil {
		return User{}, fmt.Errorf("find user %s: %w", username, err)
	}
	for _, u := range found {
		if u.Username == username {
			return u, nil
		}
	}
	return User{}, fmt.Errorf("find user %s: the search lists %d users, none of that name: %w", username, len(found), ErrRefused)
}

// UpdateUser writes u's group and quota (PUT /api/user/; zero fields are
// left as they are).
func (c *Client) UpdateUser(ctx context.Context, u User) error {
	if err := c.Call(ctx, http.MethodPut, "/api/user/", User{ID: u.ID, Username: u.Username, DisplayName: u.DisplayName, Group: u.Group, Quota: u.Quota}, nil); err != nil {
		return fmt.Errorf("update user %s: %w", u.Username, err)
	}
	return nil
}

// Channel is the part of one-api's channel record the provisioner writes.
type Channel struct {
	ID      int     `json:"id,omitempty"`
	Type    int     `json:"type"`
	Name    string  `json:"name"`
	Key     string  `json:"key,omitempty"`
	BaseURL *string `json:"base_url,omitempty"`
	Models  string  `json:"models"`
	Group   string  `json:"group"`
	Status  int     `json:"status,omitempty"`
}

// ChannelTypeOpenAI is one-api's channel type 1: an OpenAI-compatible
// upstream at the channel's base_url (requests go to base_url + /v1/...).
const ChannelTypeOpenAI = 1

// AddChannel creates ch (POST /api/channel/, which answers no id) and
// returns its id, found by its name, which must be unique.
func (c *Client) AddChannel(ctx context.Context, ch Channel) (int, error) {
	if err := c.Call(ctx, http.MethodPost, "/api/channel/", ch, nil); err != nil {
		return 0, fmt.Errorf("add channel %s: %w", ch.Name, err)
	}
	var found []Channel
	if err := c.Call(ctx, http.MethodGet, "/api/channel/search?keyword="+url.QueryEscape(ch.Name), nil, &found); err != nil {
		return 0, fmt.Errorf("find channel %s: %w", ch.Name, err)
	}
	id := 0
	for _, f := range found {
		if f.Name == ch.Name {
			if id != 0 {
				return 0, fmt.Errorf("find channel %s: two channels of that name (%d, %d): %w", ch.Name, id, f.ID, ErrRefused)
			}
			id = f.ID
		}
	}
	if id == 0 {
		return 0, fmt.Errorf("find channel %s: the search lists %d channels, none of that name: %w", ch.Name, len(found), ErrRefused)
	}
	return id, nil
}

// Token is a gateway token (an API key of one-api: "Authorization: Bearer
// KEY" on /v1/..., with or without the sk- prefix).
type Token struct {
	ID             int    `json:"id,omitempty"`
	UserID         int    `json:"user_id,omitempty"`
	Key            string `json:"key,omitempty"`
	Name           string `json:"name"`
	ExpiredTime    int64  `json:"expired_time"`
	RemainQuota    int64  `json:"remain_quota"`
	UnlimitedQuota bool   `json:"unlimited_quota"`
}

// Tokens lists the client's user's tokens (GET /api/token/, one page of
// one-api's page size, 10: the provisioner's users have two at most).
func (c *Client) Tokens(ctx context.Context) ([]Token, error) {
	var ts []Token
	if err := c.Call(ctx, http.MethodGet, "/api/token/?p=0", nil, &ts); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return ts, nil
}

// DeleteToken deletes one of the client's user's tokens.
func (c *Client) DeleteToken(ctx context.Context, id int) error {
	if err := c.Call(ctx, http.MethodDelete, "/api/token/"+strconv.Itoa(id), nil, nil); err != nil {
		return fmt.Errorf("delete token %d: %w", id, err)
	}
	return nil
}

// AddToken creates a token of the client's user (POST /api/token/) that
// never expires and has no quota of its own (the user's quota bounds it),
// and reads it back (GET /api/token/ID) to check it is the user's.
func (c *Client) AddToken(ctx context.Context, name string) (Token, error) {
	var made Token
	if err := c.Call(ctx, http.MethodPost, "/api/token/", Token{Name: name, ExpiredTime: -1, RemainQuota: 0, UnlimitedQuota: true}, &made); err != nil {
		return Token{}, fmt.Errorf("add token %s: %w", name, err)
	}
	if made.ID == 0 || made.Key == "" {
		return Token{}, fmt.Errorf("add token %s: the answer carries no id or key: %w", name, ErrRefused)
	}
	var back Token
	if err := c.Call(ctx, http.MethodGet, "/api/token/"+strconv.Itoa(made.ID), nil, &back); err != nil {
		return Token{}, fmt.Errorf("read token %s back: %w", name, err)
	}
	if back.Key != made.Key || back.UserID != made.UserID {
		return Token{}, fmt.Errorf("read token %s back: id %d holds another key or user: %w", name, made.ID, ErrRefused)
	}
	return back, nil
}
