// Package schedlock is a client of the schedlock service (ShedLock's lock semantics over HTTP), with the standard
// library only. The gocron adapter (../gocron) and the schedlock command (../cmd/schedlock) share it.
//
//	client := schedlock.FromEnv() // SCHEDLOCK_URL, SCHEDLOCK_TOKEN or SCHEDLOCK_TOKEN_FILE
//	lease, err := client.Acquire(ctx, "nightly-report", schedlock.AcquireRequest{AtMostFor: 10 * time.Minute})
//	switch {
//	case errors.Is(err, schedlock.ErrHeld): // another holder has it: skip
//	case errors.Is(err, schedlock.ErrUnavailable): // the lock's state is unknown: do not run (fail-closed)
//	case err != nil: // *APIError: a request the service rejected (bad name, wrong token)
//	}
//	defer client.Release(ctx, lease.Name, lease.Token, true)
//
// Every error is an *APIError (the service answered with an error body) or an *UnavailableError (no answer, or not
// the service's); errors.Is tells them apart with ErrHeld, ErrDone, ErrNotHolder, ErrNotFound and ErrUnavailable.
package schedlock

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

const (
	// DefaultURL is the service when neither the Client nor SCHEDLOCK_URL names one.
	DefaultURL = "http://127.0.0.1:8000"
	// DefaultTimeout bounds one request; a lock call that takes longer is "service unavailable".
	DefaultTimeout = 10 * time.Second
)

// The environment FromEnv reads.
const (
	EnvURL       = "SCHEDLOCK_URL"
	EnvToken     = "SCHEDLOCK_TOKEN"
	EnvTokenFile = "SCHEDLOCK_TOKEN_FILE"
)

var (
	// ErrHeld: another holder has the lock (409 lock_held); skip the run.
	ErrHeld = errors.New("schedlock: lock held")
	// ErrDone: the tick asked for was already completed (409 slot_done); skip the run.
	ErrDone = errors.New("schedlock: tick already done")
	// ErrNotHolder: the lease token no longer holds the lock (409 not_holder): released, expired or taken over.
	ErrNotHolder = errors.New("schedlock: not the holder")
	// ErrNotFound: no lock of that name was ever taken (404 lock_not_found).
	ErrNotFound = errors.New("schedlock: no such lock")
	// ErrUnavailable: the service could not decide (unreachable, timed out, 5xx, or not its answer).
	ErrUnavailable = errors.New("schedlock: lock service unavailable")
	// ErrRateLimited: the caller is over its quota (429 rate_limited); APIError.RetryAfter says when to try again.
	// No verdict on the lock: a lease stays held, an extension may be retried.
	ErrRateLimited = errors.New("schedlock: rate limited")
)

// APIError is the service's error answer {"error": {"code", "message", ...}}. Codes the client knows match the
// sentinels through errors.Is; any 5xx matches ErrUnavailable. Other 4xx are requests the service rejected (422
// invalid_request, 401 unauthorized, 403 forbidden): a configuration bug, never taken for a skip.
type APIError struct {
	Status     int
	Code       string
	Message    string
	Details    map[string]any // the error body's other fields (locked_by, lock_until, field, ...)
	RetryAfter time.Duration  // the Retry-After header, when sent
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message) }

// Is matches the sentinel a code stands for.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrHeld:
		return e.Code == "lock_held"
	case ErrDone:
		return e.Code == "slot_done"
	case ErrNotHolder:
		return e.Code == "not_holder"
	case ErrNotFound:
		return e.Code == "lock_not_found"
	case ErrRateLimited:
		return e.Code == "rate_limited"
	case ErrUnavailable:
		return e.Status >= 500
	}
	return false
}

// Detail is a string field of the error body ("" when absent).
func (e *APIError) Detail(key string) string {
	value, _ := e.Details[key].(string)
	return value
}

// UnavailableError is a request that got no answer from the service, or one that is not the service's.
type UnavailableError struct {
	Message string
	Err     error // the transport's error, when there was one
}

func (e *UnavailableError) Error() string        { return e.Message }
func (e *UnavailableError) Unwrap() error        { return e.Err }
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Client is the schedlock service. The zero value works: defaults are filled in per request. Safe for concurrent use.
type Client struct {
	URL       string        // default DefaultURL
	Token     string        // API token, sent as a bearer token; wins over TokenFile
	TokenFile string        // a file holding the token, read at every request (a rotated token is picked up)
	HTTP      *http.Client  // default http.DefaultClient
	Timeout   time.Duration // per request; default DefaultTimeout
	UserAgent string        // default "schedlock-go/VERSION"
}

// FromEnv is a Client for SCHEDLOCK_URL (default http://127.0.0.1:8000), SCHEDLOCK_TOKEN and SCHEDLOCK_TOKEN_FILE
// (a file holding the token, such as a Kubernetes projected service-account token; SCHEDLOCK_TOKEN wins).
func FromEnv() *Client {
	return &Client{URL: os.Getenv(EnvURL), Token: os.Getenv(EnvToken), TokenFile: os.Getenv(EnvTokenFile)}
}

// BaseURL is the service's URL without a trailing slash.
func (c *Client) BaseURL() string {
	if c.URL == "" {
		return DefaultURL
	}
	return strings.TrimRight(c.URL, "/")
}

// token is the bearer token: Token, else the content of TokenFile read now (so a rotated file is picked up).
func (c *Client) token() (string, error) {
	if c.Token != "" || c.TokenFile == "" {
		return c.Token, nil
	}
	data, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", &APIError{Code: "token_file_unreadable",
			Message: fmt.Sprintf("%s %s: cannot read the token: %v", EnvTokenFile, c.TokenFile, unwrapPath(err))}
	}
	return strings.TrimSpace(string(data)), nil
}

// call is one request: method, path, query and JSON body; a 2xx answer is decoded into out. what names the
// operation in errors ("acquire 'nightly'").
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in any, what string, out any) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	token, err := c.token()
	if err != nil {
		return err
	}
	target := c.BaseURL() + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		encoded, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(encoded)
	}
	request, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return &UnavailableError{Message: fmt.Sprintf("%s: cannot reach the lock service at %s: %v", what, c.BaseURL(), err), Err: err}
	}
	request.Header.Set("Accept", "application/json")
	if in != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	agent := c.UserAgent
	if agent == "" {
		agent = "schedlock-go/" + Version
	}
	request.Header.Set("User-Agent", agent)
	if token != "" {
		request.Header.Set("Authorization", "Bearer "+token)
	}
	httpClient := c.HTTP
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	response, err := httpClient.Do(request)
	if err != nil {
		return &UnavailableError{Message: fmt.Sprintf("%s: cannot reach the lock service at %s: %v", what, c.BaseURL(), transportReason(err)), Err: err}
	}
	defer response.Body.Close()
	data, err := io.ReadAll(io.LimitReader(response.Body, 16<<20))
	if err != nil {
		return &UnavailableError{Message: fmt.Sprintf("%s: cannot reach the lock service at %s: reading the answer: %v", what, c.BaseURL(), err), Err: err}
	}
	return decode(response, data, what, out)
}

// decode turns an answer into out (2xx) or the error it stands for.
func decode(response *http.Response, data []byte, what string, out any) error {
	var object map[string]json.RawMessage
	isObject := json.Unmarshal(data, &object) == nil && object != nil
	status := response.StatusCode
	if status >= 200 && status < 300 {
		if !isObject {
			return &UnavailableError{Message: fmt.Sprintf("%s: the answer is not JSON; is this a schedlock URL?", what)}
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return &UnavailableError{Message: fmt.Sprintf("%s: not a schedlock answer (%v)", what, err)}
			}
			if checked, ok := out.(interface{ check() error }); ok {
				if err := checked.check(); err != nil {
					return &UnavailableError{Message: fmt.Sprintf("%s: not a schedlock answer (%v)", what, err)}
				}
			}
		}
		return nil
	}
	failure := &APIError{Status: status, Details: map[string]any{}}
	if seconds, err := strconv.ParseFloat(response.Header.Get("Retry-After"), 64); err == nil {
		failure.RetryAfter = time.Duration(seconds * float64(time.Second))
	}
	var body map[string]any
	if raw, ok := object["error"]; isObject && ok && json.Unmarshal(raw, &body) == nil && body != nil {
		if code, ok := body["code"].(string); ok {
			failure.Code = code
			failure.Message, _ = body["message"].(string)
			if failure.Message == "" {
				failure.Message = code
			}
			for key, value := range body {
				if key != "code" && key != "message" {
					failure.Details[key] = value
				}
			}
			return failure
		}
	}
	failure.Code = fmt.Sprintf("http_%d", status)
	failure.Message = fmt.Sprintf("HTTP %d %s without a schedlock error body", status, http.StatusText(status))
	return failure
}

// transportReason is what went wrong on the way, without net/http's "Post \"URL\": " prefix (the URL is said).
func transportReason(err error) error {
	var urlError *url.Error
	if errors.As(err, &urlError) {
		return urlError.Err
	}
	return err
}

func unwrapPath(err error) error {
	var pathError *os.PathError
	if errors.As(err, &pathError) {
		return pathError.Err
	}
	return err
}
