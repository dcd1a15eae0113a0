package cli

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
)

// member is one cluster of the set, reached through one context.
type member struct {
	Context string
	ID      string
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Config is the context's REST config (pods/exec needs it).
	Config *rest.Config
}

func (o *Options) find(ms []*member, name string) (*member, error) {
	for _, m := range ms {
		if m.ID == name || m.Context == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no cluster or context %q among %s", name, ids(ms))
}

func ids(ms []*member) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.ID)
	}
	return strings.Join(s, ", ")
}

func listClusters(ctx context.Context, m *member) ([]v1.CoastguardCluster, error) {
	l, err := m.Dynamic.Resource(v1.CoastguardClusterGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]v1.CoastguardCluster, len(l.Items))
	for i := range l.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &out[i]); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func listMCNPs(ctx context.Context, m *member) ([]v1.MultiClusterNetworkPolicy, error) {
	l, err := m.Dynamic.Resource(v1.GroupVersionResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]v1.MultiClusterNetworkPolicy, len(l.Items))
	for i := range l.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &out[i]); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out, nil
}

// live is everything read from the clusters.
type live struct {
	members  []*member
	inv      *enforce.Inventory
	pods     map[string][]corev1.Pod                   // cluster -> pods
	ns       map[string]map[string]map[string]string   // cluster -> ns -> labels
	netpols  map[string][]networkingv1.NetworkPolicy   // cluster -> all NetworkPolicies
	mcnps    map[string][]v1.MultiClusterNetworkPolicy // origin -> MCNPs
	byIP     map[netip.Addr]string                     // pod IP -> cluster/ns/pod
	clusters map[string][]v1.CoastguardCluster         // cluster -> its view
	adm      map[string]enforce.Admission              // cluster -> its guard rails and consent
	// services are the exported Services (those with a ServiceExport),
	// cluster -> namespace/name -> Service.
	services map[string]map[string]*corev1.Service
	// nets is each cluster's own trusted network knowledge, as its daemon
	// has it: the Submariner Cluster objects in that cluster's apiserver
	// merged with --cluster-cidrs. Pod-IP ownership is decided by the
	// enforcing cluster's view, never by another member's copy.
	nets map[string]enforce.Networks
}

// load reads every cluster and builds the enforce.Inventory the daemons
// converge on: each cluster's objects through a static kube inventory
// (the daemon's kind table) into the entries its daemon writes, and those
// through model.Converge, as `coastguardd render` does.
func (o *Options) load(ctx context.Context, ms []*member) (*live, error) {
	l := &live{members: ms, pods: map[string][]corev1.Pod{},
		ns: map[string]map[string]map[string]string{}, netpols: map[string][]networkingv1.NetworkPolicy{},
		mcnps: map[string][]v1.MultiClusterNetworkPolicy{}, byIP: map[netip.Addr]string{}, clusters: map[string][]v1.CoastguardCluster{}}
	// Trusted CIDRs (pod-IP ownership), as the daemons learn them:
	// Submariner's Cluster objects (the broker syncs them everywhere) and
	// --cluster-cidrs.
	cfgNets, err := enforce.ParseClusterCIDRs(o.ClusterCIDRs)
	if err != nil {
		return nil, fmt.Errorf("--cluster-cidrs: %w", err)
	}
	if l.adm, err = o.admissions(ctx, ms); err != nil {
		return nil, err
	}
	entries := map[string]kube.Snapshot{}
	l.nets = map[string]enforce.Networks{}
	all := []enforce.Networks{cfgNets}
	for _, m := range ms {
		objs, err := l.loadMember(ctx, m)
		if err != nil {
			return nil, err
		}
		subs := make([]kube.SubmarinerCluster, 0, len(objs.SubmarinerClusters))
		for _, u := range objs.SubmarinerClusters {
			subs = append(subs, kube.SubmarinerClusterFrom(u))
		}
		own, errs := kube.SubmarinerNetworks(subs)
		for _, e := range errs {
			o.warnf("%s: %v (its daemon ignores that range too)", m.ID, e)
		}
		l.nets[m.ID] = enforce.MergeNetworks(own, cfgNets)
		all = append(all, own)
		if entries[m.ID], err = liveEntries(m.ID, objs, o.ErrOut); err != nil {
			return nil, err
		}
	}
	if l.inv, err = model.Converge(entries); err != nil {
		return nil, err
	}
	// Readers that are not about one enforcing cluster (notes on which
	// clusters use Globalnet) see every member's knowledge; admit switches
	// to the enforcing cluster's own.
	l.inv.SetNetworks(enforce.MergeNetworks(all...))
	return l, nil
}

// loadMember reads one cluster: the objects its daemon's inventory reads
// (returned), and what the commands show of it: namespaces, pods (and
// their IPs), exported Services, NetworkPolicies, MCNPs and
// CoastguardClusters.
func (l *live) loadMember(ctx context.Context, m *member) (kube.StaticObjects, error) {
	objs, err := liveObjects(ctx, m)
	if err != nil {
		return objs, err
	}
	ccs, _ := listClusters(ctx, m)
	l.clusters[m.ID] = ccs
	l.ns[m.ID] = map[string]map[string]string{}
	for _, n := range objs.Namespaces {
		l.ns[m.ID][n.Name] = n.Labels
	}
	for _, p := range objs.Pods {
		l.pods[m.ID] = append(l.pods[m.ID], *p)
		v, err := kube.PodToValue(p)
		if err != nil || p.Spec.HostNetwork {
			continue
		}
		for _, ip := range v.IPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				l.byIP[a] = m.ID + "/" + p.Namespace + "/" + p.Name
			}
		}
	}
	l.setServices(m.ID, slices.Collect(maps.Values(exported(objs))))
	nps, err := m.Client.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return objs, fmt.Errorf("%s: networkpolicies: %w", m.ID, err)
	}
	l.netpols[m.ID] = nps.Items
	mc := make([]v1.MultiClusterNetworkPolicy, len(objs.Policies))
	for i, u := range objs.Policies {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &mc[i]); err != nil {
			return objs, fmt.Errorf("%s: multiclusternetworkpolicies: %w", m.ID, err)
		}
	}
	sort.Slice(mc, func(i, j int) bool { return mc[i].Namespace+"/"+mc[i].Name < mc[j].Namespace+"/"+mc[j].Name })
	l.mcnps[m.ID] = mc
	return objs, nil
}

// setServices records the exported Services of a cluster.
func (l *live) setServices(cluster string, svcs []*corev1.Service) {
	if l.services == nil {
		l.services = map[string]map[string]*corev1.Service{}
	}
	m := map[string]*corev1.Service{}
	for _, s := range svcs {
		m[s.Namespace+"/"+s.Name] = s
	}
	l.services[cluster] = m
}

// generated reports whether a NetworkPolicy was generated by coastguard.
func generated(np *networkingv1.NetworkPolicy) bool {
	return np.Labels[enforce.LabelManagedBy] == enforce.ManagedByValue
}

func (l *live) pod(cluster, ns, name string) (*corev1.Pod, error) {
	for i := range l.pods[cluster] {
		p := &l.pods[cluster][i]
		if p.Namespace == ns && p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s not found in cluster %s", ns, name, cluster)
}
