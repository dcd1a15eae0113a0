package main

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
)

// metricsAuth protects /metrics the way kube-rbac-proxy and
// controller-runtime do: the bearer token is checked with a TokenReview and
// the user's right to "get" the non-resource URL with a SubjectAccessReview,
// both through k8s.io/apiserver's delegating authenticator and authorizer
// (with their caches: 1m for tokens, 5m allow / 30s deny for decisions).
// The daemon needs create on tokenreviews and subjectaccessreviews.
type metricsAuth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
	log   *slog.Logger
}

func newMetricsAuth(client kubernetes.Interface, log *slog.Logger) (*metricsAuth, error) {
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
		CacheTTL:                 time.Minute,
	}.New()
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, err
	}
	return &metricsAuth{authn: authn, authz: authz, log: log}, nil
}

// wrap fails closed: no token, a rejected token, a review error or a denial
// all refuse the request.
func (m *metricsAuth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok, err := m.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				m.log.Debug("metrics: authentication failed", "remote", r.RemoteAddr, "err", err)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="coastguardd metrics"`)
			http.Error(w, "Unauthorized: a Kubernetes bearer token is required", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{
			User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path, ResourceRequest: false,
		}
		decision, reason, err := m.authz.Authorize(r.Context(), attrs)
		if err != nil || decision != authorizer.DecisionAllow {
			m.log.Debug("metrics: access denied", "user", res.User.GetName(), "reason", reason, "err", err)
			http.Error(w, "Forbidden: "+res.User.GetName()+" may not get "+r.URL.Path, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
