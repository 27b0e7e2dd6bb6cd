package schedlockgocron

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

var (
	// ErrHeld: another holder has the lock; the run is skipped.
	ErrHeld = errors.New("schedlock: lock held")
	// ErrDone: the tick was already completed; the run is skipped.
	ErrDone = errors.New("schedlock: tick already done")
	// ErrUnavailable: the service could not be asked or did not answer; the lock's state is unknown.
	ErrUnavailable = errors.New("schedlock: lock service unavailable")
)

// APIError is a request the service rejected: 422 invalid_request (a bad job name as a lock name), 401
// unauthorized, 403 forbidden, ... A configuration bug, never taken for a skip.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("schedlock: %d %s: %s", e.Status, e.Code, e.Message)
}

// Client is the schedlock service the Locker asks. The zero value works: defaults are filled in per request.
type Client struct {
	URL     string        // default http://127.0.0.1:8000
	Token   string        // API token, sent as a bearer token when not empty
	HTTP    *http.Client  // default http.DefaultClient
	Timeout time.Duration // per request; default 10s
	Holder  string        // recorded in locked_by; default "gocron on HOST pid PID"
}

type acquired struct {
	Token     string    `json:"token"`
	LockUntil time.Time `json:"lock_until"`
	Slot      string    `json:"slot"`
}

// acquire takes the lock for slot ("" for none). Errors wrap ErrHeld, ErrDone or ErrUnavailable, or are *APIError.
func (c *Client) acquire(ctx context.Context, name string, atMost time.Duration, slot, holder string) (*acquired, error) {
	request := map[string]string{"lock_at_most_for": millis(atMost), "lock_at_least_for": "0ms", "holder": holder}
	if slot != "" {
		request["slot"] = slot
	}
	var answer acquired
	if err := c.call(ctx, name, "acquire", request, &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// release gives the lock back; completed: false leaves its slot open.
func (c *Client) release(ctx context.Context, name, token string, completed bool) error {
	return c.call(ctx, name, "release", map[string]any{"token": token, "completed": completed}, nil)
}

// call POSTs one operation on a lock and decodes a 200 answer into out.
func (c *Client) call(ctx context.Context, name, operation string, in, out any) error {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	encoded, err := json.Marshal(in)
	if err != nil {
		return err
	}
	target := c.baseURL() + "/v1/locks/" + url.PathEscape(name) + "/" + operation
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(encoded))
	if err != nil {
		return err
	}
	request.Header.Set("Accept", "application/json")
	request.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		request.Header.Set("Authorization", "Bearer "+c.Token)
	}
	httpClient := c.HTTP
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	response, err := httpClient.Do(request)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer response.Body.Close()
	data, err := io.ReadAll(io.LimitReader(response.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: reading the answer: %v", ErrUnavailable, err)
	}
	if response.StatusCode == http.StatusOK {
		if out != nil && json.Unmarshal(data, out) != nil {
			return fmt.Errorf("%w: not the service's JSON: %.200s", ErrUnavailable, data)
		}
		return nil
	}
	var failure struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if response.StatusCode >= 500 || json.Unmarshal(data, &failure) != nil || failure.Error == nil {
		return fmt.Errorf("%w: HTTP %d: %.200s", ErrUnavailable, response.StatusCode, data)
	}
	switch failure.Error.Code {
	case "lock_held":
		return fmt.Errorf("%w: %s", ErrHeld, failure.Error.Message)
	case "slot_done":
		return fmt.Errorf("%w: %s", ErrDone, failure.Error.Message)
	}
	return &APIError{Status: response.StatusCode, Code: failure.Error.Code, Message: failure.Error.Message}
}

func (c *Client) baseURL() string {
	if c.URL == "" {
		return "http://127.0.0.1:8000"
	}
	return strings.TrimRight(c.URL, "/")
}

func (c *Client) holder() string {
	if c.Holder != "" {
		return c.Holder
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("gocron on %s pid %d", host, os.Getpid())
}

// millis is a duration in ShedLock's short form, which the service reads: 90s -> "90000ms".
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
