// A real OpenID provider for the suite: zitadel/oidc's example provider (github.com/zitadel/oidc/v3,
// example/server), configured here to issue JWT access tokens by the client-credentials grant.
//
// Usage: oidc-provider -audience schedlock -client billing-app:s3cret [-client ID:SECRET ...]
//
// It listens on a free loopback port, its issuer is http://127.0.0.1:<port>/ (discovery at
// /.well-known/openid-configuration, keys at its jwks_uri), and it prints {"issuer": "..."} on stdout once it
// serves. Each client's access token is a JWT signed RS256 with sub and client_id the client's id and aud the
// audience given. Nothing of the provider is copied here: only which clients exist and what their tokens are.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// jwtClient is a client-credentials client whose access tokens are JWTs (the example's service user gets opaque
// ones).
type jwtClient struct{ *storage.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (jwtClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}

// store is the example's in-memory storage with our clients for the client-credentials grant.
type store struct {
	*storage.Storage
	secrets  map[string]string
	audience string
}

var errWrongClient = errors.New("wrong client id or secret")

func (s *store) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	if want, ok := s.secrets[id]; !ok || want != secret {
		return nil, errWrongClient
	}
	return jwtClient{storage.WebClient(id, secret)}, nil
}

func (s *store) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	if _, ok := s.secrets[id]; !ok {
		return nil, errWrongClient
	}
	return &oidc.JWTTokenRequest{Subject: id, Audience: []string{s.audience}, Scopes: scopes}, nil
}

type clients map[string]string

func (c clients) String() string { return fmt.Sprint(len(c), " clients") }
func (c clients) Set(value string) error {
	id, secret, ok := strings.Cut(value, ":")
	if !ok || id == "" || secret == "" {
		return fmt.Errorf("want ID:SECRET, got %q", value)
	}
	c[id] = secret
	return nil
}

func main() {
	secrets := clients{}
	audience := flag.String("audience", "schedlock", "the aud of every access token")
	flag.Var(secrets, "client", "ID:SECRET of a client-credentials client (repeatable)")
	flag.Parse()

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	issuer := fmt.Sprintf("http://127.0.0.1:%d/", listener.Addr().(*net.TCPAddr).Port)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	base := storage.NewStorage(storage.NewUserStore(issuer))
	router := exampleop.SetupServer(issuer, &store{base, secrets, *audience}, logger, false)

	if err := json.NewEncoder(os.Stdout).Encode(map[string]string{"issuer": issuer}); err != nil {
		os.Exit(1)
	}
	if err := http.Serve(listener, router); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
