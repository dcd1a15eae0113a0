package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// DefaultRequestTimeout bounds each request to one context's apiserver (and
// finding its cluster ID), so that one unreachable context costs seconds.
const DefaultRequestTimeout = 5 * time.Second

// reached is what connecting to one kubeconfig context gave: a member, or
// a note that the context reaches no coastguard install (skipped), or an
// error that names the context and the fix.
type reached struct {
	Context string
	Member  *member
	Skipped string
	Err     error
}

// kubeconfig loads the merged kubeconfig the flags name (--kubeconfig, else
// $KUBECONFIG with its files merged, else ~/.kube/config).
func (o *Options) kubeconfig() (*clientcmdapi.Config, error) {
	raw, err := o.Flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return &raw, nil
}

// currentContext is the context kubectl would use: --context, else the
// kubeconfig's current context.
func (o *Options) currentContext() (string, error) {
	if o.Flags.Context != nil && *o.Flags.Context != "" {
		return *o.Flags.Context, nil
	}
	raw, err := o.kubeconfig()
	if err != nil {
		return "", err
	}
	return raw.CurrentContext, nil
}

// selected returns the contexts of the set and whether they were named:
// --contexts, else --context, else every context of the kubeconfig.
func (o *Options) selected(raw *clientcmdapi.Config) (names []string, named bool, err error) {
	one := ""
	if o.Flags.Context != nil {
		one = *o.Flags.Context
	}
	switch {
	case len(o.Contexts) > 0 && one != "":
		return nil, false, errors.New("--context selects one context and --contexts a set: pass only one of them")
	case len(o.Contexts) > 0:
		names, named = o.Contexts, true
	case one != "":
		names, named = []string{one}, true
	default:
		names = sortedContexts(raw)
	}
	if len(names) == 0 {
		return nil, false, errors.New("no kubeconfig contexts; pass --kubeconfig or --contexts")
	}
	for _, n := range names {
		if _, ok := raw.Contexts[n]; !ok {
			return nil, false, fmt.Errorf("context %q not in kubeconfig (it has: %s)", n, strings.Join(sortedContexts(raw), ", "))
		}
	}
	return names, named, nil
}

// reach connects to the selected contexts in parallel, each within its
// request timeout. It fails only when the kubeconfig cannot be read or
// names no such context; per-context problems are in the results, in
// context order. A named context without coastguard is an error, an
// unnamed one is skipped.
func (o *Options) reach(ctx context.Context) ([]reached, error) {
	raw, err := o.kubeconfig()
	if err != nil {
		return nil, err
	}
	names, named, err := o.selected(raw)
	if err != nil {
		return nil, err
	}
	out := make([]reached, len(names))
	cfgs := make([]*rest.Config, len(names))
	for i, n := range names { // one after another: restConfig points --context at n
		if cfgs[i], err = o.restConfig(n); err != nil {
			out[i] = reached{Context: n, Err: fmt.Errorf("context %s: %w (fix the context's cluster and user entries in the kubeconfig)", n, err)}
		}
	}
	var wg sync.WaitGroup
	for i, n := range names {
		cfg := cfgs[i]
		if cfg == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = o.reachOne(ctx, raw, n, cfg)
			if out[i].Skipped != "" && named {
				out[i].Err = fmt.Errorf("context %s: %s", n, out[i].Skipped)
				out[i].Skipped = ""
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// restConfig builds the client config of context name with the kubeconfig
// flags, which apply to every context of the set (--user, --as,
// --request-timeout, ...). It is not safe for concurrent use.
func (o *Options) restConfig(name string) (*rest.Config, error) {
	saved := o.Flags.Context
	o.Flags.Context = &name
	defer func() { o.Flags.Context = saved }()
	return o.Flags.ToRESTConfig()
}

func sortedContexts(raw *clientcmdapi.Config) []string {
	var out []string
	for n := range raw.Contexts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// reachOne finds the cluster ID of one context within its request timeout
// (--request-timeout; 0 waits as long as the apiserver takes, as kubectl).
func (o *Options) reachOne(ctx context.Context, raw *clientcmdapi.Config, name string, cfg *rest.Config) reached {
	r := reached{Context: name}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		r.Err = fmt.Errorf("context %s: %w", name, err)
		return r
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		r.Err = fmt.Errorf("context %s: %w", name, err)
		return r
	}
	m := &member{Context: name, Client: cs, Dynamic: dyn, Config: cfg}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.Timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
	}
	defer cancel()
	id, skip, err := o.clusterID(cctx, m)
	switch {
	case err != nil:
		r.Err = contextError(name, o.userOf(raw, name, cfg), cfg, o.Namespace, err)
	case skip != "":
		r.Skipped = skip
	default:
		m.ID = id
		r.Member = m
	}
	return r
}

// userOf names the user a context's requests authenticate as: --as when
// impersonating, else --user, else the context's user entry.
func (o *Options) userOf(raw *clientcmdapi.Config, name string, cfg *rest.Config) string {
	switch {
	case cfg.Impersonate.UserName != "":
		return cfg.Impersonate.UserName + " (impersonated)"
	case o.Flags.AuthInfoName != nil && *o.Flags.AuthInfoName != "":
		return *o.Flags.AuthInfoName
	}
	return raw.Contexts[name].AuthInfo
}

// clusterID finds a context's cluster ID: the CoastguardCluster its leader
// marks local, else its coastguard Lease. skip is set (and err nil) when the
// context reaches a cluster without coastguard: no CoastguardCluster API
// and no coastguard Lease.
func (o *Options) clusterID(ctx context.Context, m *member) (id, skip string, err error) {
	ccs, err := listClusters(ctx, m)
	noAPI := apierrors.IsNotFound(err)
	if err != nil && !noAPI {
		return "", "", err
	}
	for _, c := range ccs {
		if c.Status.Local {
			return c.Name, "", nil
		}
	}
	leases, err := m.Client.CoordinationV1().Leases(o.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", "", err
	}
	if leases != nil {
		for _, l := range leases.Items {
			if id, ok := strings.CutPrefix(l.Name, "coastguard-"); ok {
				return id, "", nil
			}
		}
	}
	if noAPI {
		return "", "no coastguard install (no CoastguardCluster API, no coastguard Lease in namespace " + o.Namespace + ")", nil
	}
	return "", "", fmt.Errorf("the CoastguardCluster API is installed but no coastguardd leads in namespace %s (no local CoastguardCluster, no coastguard Lease): is coastguardd running there? Else pass --coastguard-namespace", o.Namespace)
}

// contextError names the context, what went wrong and what to do.
func contextError(name, user string, cfg *rest.Config, ns string, err error) error {
	server := cfg.Host
	var netErr net.Error
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("context %s: the apiserver %s rejected the credentials of user %q (401 Unauthorized). "+
			"Refresh that user's credentials; if you merged kubeconfigs, give every cluster's user a unique name "+
			"(with KUBECONFIG=a:b, the first file that defines a user name wins, so clusters that share one get the wrong credentials)",
			name, server, user)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("context %s: user %q may not read coastguard's objects (403 Forbidden: %v). "+
			"Use a context that can list coastguardclusters, multiclusternetworkpolicies and leases in %s", name, user, err, ns)
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || (errors.As(err, &netErr) && netErr.Timeout()):
		return fmt.Errorf("context %s: the apiserver %s did not answer within %s. "+
			"Check the context's server address and that the cluster is up, or raise --request-timeout", name, server, cfg.Timeout)
	case errors.As(err, &netErr):
		return fmt.Errorf("context %s: cannot reach the apiserver %s: %v. Check the context's server address and that the cluster is up", name, server, err)
	}
	return fmt.Errorf("context %s: finding the cluster ID: %w", name, err)
}

// connect returns the members of every selected context that reaches a
// coastguard install. Skipped contexts are noted and failed ones warned
// about on ErrOut; it fails only when no context works.
func (o *Options) connect(ctx context.Context) ([]*member, error) {
	rs, err := o.reach(ctx)
	if err != nil {
		return nil, err
	}
	var ms []*member
	var errs []error
	for _, r := range rs {
		switch {
		case r.Member != nil:
			ms = append(ms, r.Member)
		case r.Skipped != "":
			o.notef("context %s skipped: %s", r.Context, r.Skipped)
		default:
			errs = append(errs, r.Err)
		}
	}
	if len(ms) == 0 {
		if len(errs) == 0 {
			return nil, errors.New("no kubeconfig context reaches a coastguard install; pass --kubeconfig or --contexts")
		}
		return nil, errors.Join(errs...)
	}
	for _, err := range errs {
		o.warnf("%v", err)
	}
	return ms, nil
}

// notef writes a note to ErrOut (dropping its write error, as warnf).
func (o *Options) notef(format string, a ...any) {
	_, _ = fmt.Fprintf(o.ErrOut, "note: "+format+"\n", a...)
}
