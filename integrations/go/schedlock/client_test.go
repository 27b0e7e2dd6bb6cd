package schedlock

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// A server that answers every acquire with the bearer token it was sent, as the lease's holder.
func echoToken(t *testing.T) *httptest.Server {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error": {"code": "unauthorized", "message": "no token"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"name": "n", "token": "lease", "fencing_token": 1, "locked_at": "2026-12-05T00:00:00.000Z",
			"lock_until": "2026-12-05T00:01:00.000Z", "locked_by": r.Header.Get("Authorization"),
			"db_time": "2026-12-05T00:00:00.000Z",
		})
	}))
	t.Cleanup(server.Close)
	return server
}

// The token file is read at every request: a rotated token is sent from the next request on, also by requests in
// flight on other goroutines (the race detector watches).
func TestTheTokenFileIsReadAtEveryRequest(t *testing.T) {
	server := echoToken(t)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := &Client{URL: server.URL, TokenFile: file}
	holder := func() string {
		lease, err := client.Acquire(context.Background(), "n", AcquireRequest{AtMostFor: time.Minute})
		if err != nil {
			t.Error(err)
			return ""
		}
		return lease.LockedBy
	}
	if got := holder(); got != "Bearer first" {
		t.Fatalf("sent %q", got)
	}
	// Rotated the way the kubelet does it: a new file renamed over the old one.
	next := file + ".new"
	if err := os.WriteFile(next, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, file); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := holder(); got != "Bearer second" {
				t.Errorf("sent %q after the rotation", got)
			}
		}()
	}
	wg.Wait()
	client.Token = "explicit" // a token given wins over the file
	if got := holder(); got != "Bearer explicit" {
		t.Fatalf("sent %q", got)
	}
}

func TestAnUnreadableTokenFileIsARejectionNotAnOutage(t *testing.T) {
	client := &Client{URL: echoToken(t).URL, TokenFile: filepath.Join(t.TempDir(), "missing")}
	_, err := client.Acquire(context.Background(), "n", AcquireRequest{AtMostFor: time.Minute})
	var api *APIError
	if !errors.As(err, &api) || api.Code != "token_file_unreadable" || errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
}

func TestErrorsMatchTheirSentinels(t *testing.T) {
	answers := map[string]struct {
		status int
		body   string
		is     error
	}{
		"held":         {409, `{"error": {"code": "lock_held", "message": "m", "locked_by": "a"}}`, ErrHeld},
		"done":         {409, `{"error": {"code": "slot_done", "message": "m"}}`, ErrDone},
		"not holder":   {409, `{"error": {"code": "not_holder", "message": "m"}}`, ErrNotHolder},
		"not found":    {404, `{"error": {"code": "lock_not_found", "message": "m"}}`, ErrNotFound},
		"storage":      {503, `{"error": {"code": "storage_unavailable", "message": "m"}}`, ErrUnavailable},
		"proxy 502":    {502, `<html>bad gateway</html>`, ErrUnavailable},
		"not json 200": {200, `<html>hello</html>`, ErrUnavailable},
		"rate limited": {429, `{"error": {"code": "rate_limited", "message": "m", "retry_after": 2}}`, ErrRateLimited},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(answer.status)
				_, _ = w.Write([]byte(answer.body))
			}))
			defer server.Close()
			_, err := (&Client{URL: server.URL}).Get(context.Background(), "n")
			if !errors.Is(err, answer.is) {
				t.Fatalf("%v is not %v", err, answer.is)
			}
			var api *APIError
			if answer.is == ErrRateLimited && (!errors.As(err, &api) || api.RetryAfter != 2*time.Second) {
				t.Fatalf("%v: Retry-After not read", err)
			}
			for _, other := range []error{ErrHeld, ErrDone, ErrNotHolder, ErrNotFound, ErrUnavailable, ErrRateLimited} {
				if other != answer.is && errors.Is(err, other) {
					t.Fatalf("%v is also %v", err, other)
				}
			}
		})
	}
	_, err := (&Client{URL: "http://127.0.0.1:1"}).Get(context.Background(), "n")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("connection refused: %v", err)
	}
}

func TestLockPathsEscapeEverythingButUnreservedCharacters(t *testing.T) {
	cases := map[string]string{"a.b": "/v1/locks/a%2Eb", "..": "/v1/locks/%2E%2E", "é x": "/v1/locks/%C3%A9%20x"}
	for name, want := range cases {
		if got, err := lockPath(name, "", true); err != nil || got != want {
			t.Errorf("%q: %q %v", name, got, err)
		}
	}
	if _, err := lockPath("a/b", "acquire", false); err == nil {
		t.Error("a '/' is refused for an acquire")
	}
	if got, _ := lockPath("a/b", "runs", true); got != "/v1/locks/a%2Fb/runs" {
		t.Errorf("got %q", got)
	}
}

func TestDurations(t *testing.T) {
	good := map[string]time.Duration{
		"500": 500 * time.Millisecond, "30s": 30 * time.Second, "10M": 10 * time.Minute, "1h": time.Hour,
		"2d": 48 * time.Hour, "PT10M": 10 * time.Minute, "pt0.5s": 500 * time.Millisecond, "P1DT1H": 25 * time.Hour,
		"PT1,25S": 1250 * time.Millisecond,
	}
	for text, want := range good {
		if got, err := ParseDuration(text, "d"); err != nil || got != want {
			t.Errorf("%q: %v %v", text, got, err)
		}
	}
	bad := map[string]string{
		"10 minutes":             "d: not a duration: '10 minutes' (use e.g. '30s', '10m', '1h' or ISO-8601 'PT10M')",
		"P":                      "d: not a duration: 'P' (use e.g. '30s', '10m', '1h' or ISO-8601 'PT10M')",
		"PT":                     "d: not a duration: 'PT' (use e.g. '30s', '10m', '1h' or ISO-8601 'PT10M')",
		"P1DT":                   "d: not a duration: 'P1DT' (use e.g. '30s', '10m', '1h' or ISO-8601 'PT10M')",
		"-1s":                    "d: not a duration: '-1s' (use e.g. '30s', '10m', '1h' or ISO-8601 'PT10M')",
		"100001d":                "d: too large",
		"P999999999D":            "d: too large",
		"P999999999DT999999999H": "d: too large: 'P999999999DT999999999H'",
	}
	for text, want := range bad {
		if _, err := ParseDuration(text, "d"); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", text, err, want)
		}
	}
	for d, want := range map[time.Duration]string{90 * time.Second: "PT90S", 500 * time.Millisecond: "PT0.5S", 0: "PT0S"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("%v: %s", d, got)
		}
	}
}

// A release answered 429 rate_limited is sent again after the service's Retry-After (bounded), not given up; a
// rejection (403) is not retried.
func TestReleaseRetryingWaitsOutA429(t *testing.T) {
	var mu sync.Mutex
	sent := 0
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent++
		n := sent
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/locks/f/release":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error": {"code": "forbidden", "message": "m"}}`))
		case n <= 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error": {"code": "rate_limited", "message": "m", "retry_after": 1}}`))
		default:
			_, _ = w.Write([]byte(`{"name": "n", "lock_until": "2026-12-05T00:00:00.000Z", "db_time": "2026-12-05T00:00:00.000Z"}`))
		}
	}))
	defer server.Close()
	var waits []time.Duration
	released, err := (&Client{URL: server.URL}).ReleaseRetrying(context.Background(), "n", "t", true, func(err error, wait time.Duration) {
		if !errors.Is(err, ErrRateLimited) {
			t.Errorf("told %v", err)
		}
		waits = append(waits, wait)
	})
	if err != nil || released.Name != "n" {
		t.Fatalf("released %v, %v", released, err)
	}
	if len(waits) != 2 || waits[0] != time.Second || waits[1] != time.Second {
		t.Fatalf("waited %v, want Retry-After (1s) twice", waits)
	}
	mu.Lock()
	sent = 0
	mu.Unlock()
	_, err = (&Client{URL: server.URL}).ReleaseRetrying(context.Background(), "f", "t", true, nil)
	var api *APIError
	if !errors.As(err, &api) || api.Status != http.StatusForbidden || sent != 1 {
		t.Fatalf("a 403 was sent %d times: %v", sent, err)
	}
}
