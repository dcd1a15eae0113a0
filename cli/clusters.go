package cli

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
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
}

// load reads every cluster and builds the same enforce.Inventory the daemons
// build from replicated state.
func (o *Options) load(ctx context.Context, ms []*member) (*live, error) {
	l := &live{members: ms, inv: enforce.NewInventory(), pods: map[string][]corev1.Pod{},
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
	var subClusters []kube.SubmarinerCluster
	for _, m := range ms {
		if sl, err := m.Dynamic.Resource(kube.SubmarinerClusterResource).Namespace("submariner-operator").List(ctx, metav1.ListOptions{}); err == nil {
			for i := range sl.Items {
				subClusters = append(subClusters, kube.SubmarinerClusterFrom(&sl.Items[i]))
			}
		}
	}
	subNets, _ := kube.SubmarinerNetworks(subClusters)
	l.inv.SetNetworks(enforce.MergeNetworks(subNets, cfgNets))
	for _, m := range ms {
		if err := l.loadMember(ctx, m); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// loadMember reads one cluster: its cluster entry, namespaces, pods,
// Services, NetworkPolicies and MCNPs.
func (l *live) loadMember(ctx context.Context, m *member) error {
	if err := l.loadCluster(ctx, m); err != nil {
		return err
	}
	nsl, err := m.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("%s: namespaces: %w", m.ID, err)
	}
	l.ns[m.ID] = map[string]map[string]string{}
	for i := range nsl.Items {
		n := &nsl.Items[i]
		l.ns[m.ID][n.Name] = n.Labels
		l.inv.SetNamespace(m.ID, enforce.Namespace{Name: n.Name, Labels: kube.NamespaceToValue(n).Labels})
	}
	if err := l.loadPods(ctx, m); err != nil {
		return err
	}
	svcs, err := loadServices(ctx, m, l.inv)
	if err != nil {
		return err
	}
	l.setServices(m.ID, svcs)
	nps, err := m.Client.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("%s: networkpolicies: %w", m.ID, err)
	}
	l.netpols[m.ID] = nps.Items
	mc, err := listMCNPs(ctx, m)
	if err != nil {
		return fmt.Errorf("%s: multiclusternetworkpolicies: %w", m.ID, err)
	}
	l.mcnps[m.ID] = mc
	for i := range mc {
		p := &mc[i]
		_ = l.inv.SetPolicy(enforce.Policy{Origin: m.ID, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
			Generation: p.Generation, Spec: p.Spec})
	}
	return nil
}

// loadCluster reads the cluster's ClusterProperties and CoastguardClusters
// into its cluster entry.
func (l *live) loadCluster(ctx context.Context, m *member) error {
	var props []kube.ClusterProperty
	pl, err := m.Dynamic.Resource(kube.ClusterPropertyResource).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		for i := range pl.Items {
			if p, err := kube.ClusterPropertyFrom(&pl.Items[i]); err == nil {
				props = append(props, p)
			}
		}
	case apierrors.IsNotFound(err):
	default:
		return fmt.Errorf("%s: clusterproperties: %w", m.ID, err)
	}
	ccs, _ := listClusters(ctx, m)
	l.clusters[m.ID] = ccs
	var info kube.ClusterInfo
	for _, c := range ccs {
		if c.Name == m.ID {
			info.PodCIDRs = c.Status.PodCIDRs
		}
	}
	cv, _ := kube.ClusterValueFrom(m.ID, props, info)
	l.inv.SetCluster(enforce.Cluster{ID: m.ID, Labels: cv.Labels, PodCIDRs: cv.PodCIDRs})
	return nil
}

// loadPods reads the cluster's pods into the inventory and the IP index.
func (l *live) loadPods(ctx context.Context, m *member) error {
	pods, err := m.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("%s: pods: %w", m.ID, err)
	}
	l.pods[m.ID] = pods.Items
	for i := range pods.Items {
		p := &pods.Items[i]
		v, err := kube.PodToValue(p)
		if err != nil {
			return fmt.Errorf("%s: pod %s/%s: %w", m.ID, p.Namespace, p.Name, err)
		}
		ep := enforce.Pod{Namespace: p.Namespace, Name: p.Name, Labels: v.Labels, IPs: v.IPs,
			Phase: corev1.PodPhase(v.Phase), HostNetwork: v.HostNetwork, NotReady: v.NotReady}
		for _, port := range v.Ports {
			ep.Ports = append(ep.Ports, enforce.Port{Name: port.Name, Port: port.Port, Protocol: corev1.Protocol(port.Protocol)})
		}
		l.inv.SetPod(m.ID, ep)
		for _, ip := range v.IPs {
			if a, err := netip.ParseAddr(ip); err == nil && !p.Spec.HostNetwork {
				l.byIP[a] = m.ID + "/" + p.Namespace + "/" + p.Name
			}
		}
	}
	return nil
}

// loadServices adds the cluster's exported Services (a Service with a
// ServiceExport) to the inventory, converted as the daemon's inventory
// does, and returns them; nothing when the ServiceExport resource is not
// installed.
func loadServices(ctx context.Context, m *member, inv *enforce.Inventory) ([]*corev1.Service, error) {
	el, err := m.Dynamic.Resource(kube.ServiceExportResource).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: serviceexports: %w", m.ID, err)
	}
	var out []*corev1.Service
	for i := range el.Items {
		ns, name := el.Items[i].GetNamespace(), el.Items[i].GetName()
		svc, err := m.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: service %s/%s: %w", m.ID, ns, name, err)
		}
		v, err := kube.ServiceToValue(svc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.ID, err)
		}
		out = append(out, svc)
		es := enforce.Service{Namespace: ns, Name: name, ClusterIPs: v.ClusterIPs, Selector: v.Selector, Headless: v.Headless,
			PublishNotReady: v.PublishNotReady}
		for _, p := range v.Ports {
			es.Ports = append(es.Ports, enforce.ServicePort{Name: p.Name, Port: p.Port, TargetPort: p.TargetPort,
				TargetPortName: p.TargetPortName, Protocol: corev1.Protocol(p.Protocol)})
		}
		inv.SetService(m.ID, es)
	}
	return out, nil
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
