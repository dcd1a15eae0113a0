package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
)

func init() { commands = append(commands, newRenderCmd) }

const renderLong = `Translates MultiClusterNetworkPolicies offline, with exactly the code the
daemon runs. DIR of --input holds one subdirectory per cluster, named by the
cluster ID, containing YAML or JSON files (multi-document allowed) of kinds
Namespace, Pod, NetworkPolicy (user-authored, left alone),
MultiClusterNetworkPolicy and ClusterProperty, and Submariner's Cluster,
ClusterGlobalEgressIP and GlobalEgressIP (submariner.io/v1: pod CIDRs,
Globalnet and its allocated egress IPs). As in a real Submariner install,
each cluster directory holds the Cluster objects of every cluster (the
broker syncs them): they are the trusted pod/service/global CIDRs that
cluster checks remote pod IPs against, together with --cluster-cidrs.
Remote pods of a cluster whose CIDRs are unknown there are left out (see
docs/SEMANTICS.md "Pod-IP ownership"). For every cluster it writes
OUT/<clusterID>/networkpolicies.yaml with the NetworkPolicies coastguard
would apply there (empty when none). Objects without metadata.namespace
are in "default", as with kubectl; a v1 List (kubectl get -o yaml) is read
item by item. Unknown kinds are ignored with a warning; kustomize files
(kustomization.yaml, kustomization.yml or Kustomization, and objects of
kustomize.config.k8s.io) are skipped silently, so a cluster directory can
also be what "kubectl apply -k" applies. Invalid input stops everything
with an error naming the file, document and object.
`

func newRenderCmd() *cobra.Command {
	var in, out, gpFlag, consentFlag string
	var cidrFlag []string
	cmd := &cobra.Command{
		Use:   "render --input DIR --output DIR",
		Short: "translate MCNPs and an inventory into NetworkPolicies, offline",
		Long:  renderLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gp, err := enforce.ParseGlobalnetPolicy(gpFlag)
			if err != nil {
				return usageError(cmd, "--globalnet-policy: "+err.Error())
			}
			cidrs, err := enforce.ParseClusterCIDRs(splitList(strings.Join(cidrFlag, ",")))
			if err != nil {
				return usageError(cmd, "--cluster-cidrs: "+err.Error())
			}
			var consent *enforce.Consent
			if consentFlag != "" {
				if consent, err = daemon.LoadConsent(consentFlag); err != nil {
					return failed(cmd, 1, err)
				}
			}
			return failed(cmd, 1, renderWith(in, out, cmd.ErrOrStderr(), gp, consent, cidrs))
		},
	}
	cmd.Flags().StringVar(&in, "input", "", "input directory: one subdirectory per cluster (required)")
	cmd.Flags().StringVar(&out, "output", "", "output directory (required)")
	cmd.Flags().StringVar(&gpFlag, "globalnet-policy", "coarse", "coarse (render cluster-wide Globalnet egress IPs and warn) or drop (fail closed); as coastguardd run")
	cmd.Flags().StringVar(&consentFlag, "consent-file", "", "consent applied in every cluster (which other clusters' MCNPs each admits, pinned labels); as coastguardd run")
	cmd.Flags().StringSliceVar(&cidrFlag, "cluster-cidrs", nil, "trusted CIDRs per cluster for every cluster, added to the Submariner Cluster objects; as coastguardd run")
	// cobra reports a missing required flag as a usage error (exit 2).
	_ = cmd.MarkFlagRequired("input")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

// render loads IN, translates for every cluster and writes OUT. Warnings and
// a per-cluster summary go to log.
func render(in, out string, log io.Writer) error {
	return renderWith(in, out, log, enforce.GlobalnetCoarse, nil)
}

// logf writes one of render's warnings or summary lines to log. They are
// diagnostics for the operator; the rendered files are the result, so a log
// that cannot be written (a closed stderr) does not fail the render.
func logf(log io.Writer, format string, a ...any) {
	_, _ = fmt.Fprintf(log, format, a...)
}

// renderGuards are the guard rails render applies: the daemon's defaults
// (protected namespaces, caps), as coastguardd run without flags.
func renderGuards() enforce.Guards {
	return guards(defaultConfig(), defaultSubmarinerNamespace)
}

// renderWith is render with a Globalnet policy (--globalnet-policy), a
// consent (--consent-file, nil: none) and operator-supplied trusted CIDRs
// (--cluster-cidrs) for every cluster.
func renderWith(in, out string, log io.Writer, gp enforce.GlobalnetPolicy, consent *enforce.Consent, cidrs ...enforce.Networks) error {
	inv, clusters, trusted, err := loadRenderInput(in, log)
	if err != nil {
		return err
	}
	inv.SetGlobalnetPolicy(gp)
	if consent != nil {
		inv.SetPinnedLabels(consent.ClusterLabels)
	}
	for _, f := range enforce.Findings(inv) {
		logf(log, "warning: %s\n", f.Message)
	}
	adm := enforce.Admission{Guards: renderGuards(), Consent: consent}
	for _, c := range clusters {
		// What c knows of every cluster's CIDRs: the Submariner Cluster
		// objects in its directory, plus --cluster-cidrs.
		inv.SetNetworks(enforce.MergeNetworks(append([]enforce.Networks{trusted[c]}, cidrs...)...))
		for _, d := range enforce.PodIPDrops(inv, c) {
			logf(log, "warning: %s: %d address(es) of cluster %s never allowed (%s), e.g. %s\n", c, d.Count, d.Cluster, d.Reason, d.Example)
		}
		nps := admitted(c, inv, adm, log)
		if err := checkCollisions(c, nps); err != nil {
			return err
		}
		if err := writeRendered(filepath.Join(out, c), nps); err != nil {
			return fmt.Errorf("cluster %s: %w", c, err)
		}
		logf(log, "%s: %d NetworkPolicies\n", c, len(nps))
	}
	return nil
}

// writeRendered writes nps to dir/networkpolicies.yaml.
func writeRendered(dir string, nps []networkingv1.NetworkPolicy) error {
	var buf bytes.Buffer
	for i := range nps {
		b, err := marshalNetworkPolicy(&nps[i])
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "networkpolicies.yaml"), buf.Bytes(), 0o644)
}

// admitted is every NetworkPolicy cluster c's daemon would generate, sorted
// by namespace and name: the outputs of model.Outputs for c under the
// daemon's guards and the consent, as the daemon's enforcer computes them.
// Skipped and degraded policies are logged.
func admitted(c string, inv *enforce.Inventory, adm enforce.Admission, log io.Writer) []networkingv1.NetworkPolicy {
	outs := model.NewOutputs(c)
	outs.SetGuards(adm.Guards)
	outs.SetConsent(adm.Consent)
	outs.Recompute(inv, nil, true)
	var nps []networkingv1.NetworkPolicy
	for _, ref := range inv.Policies() {
		res, _ := outs.Result(ref)
		if res.SkippedNoNamespace {
			logf(log, "%s: MultiClusterNetworkPolicy %s skipped: no namespace %q in this cluster\n", c, ref, ref.Namespace)
		}
		if res.Degraded != "" {
			logf(log, "%s: MultiClusterNetworkPolicy %s degraded: %s\n", c, ref, strings.Join(res.DegradedDetails, "; "))
		}
		nps = append(nps, res.NetworkPolicies...)
	}
	sort.SliceStable(nps, func(i, j int) bool {
		if nps[i].Namespace != nps[j].Namespace {
			return nps[i].Namespace < nps[j].Namespace
		}
		return nps[i].Name < nps[j].Name
	})
	return nps
}

// checkCollisions refuses output in which two generated NetworkPolicies of a
// cluster share namespace/name, naming both origins: applying it would
// silently let one policy overwrite the other.
func checkCollisions(cluster string, nps []networkingv1.NetworkPolicy) error {
	seen := map[string]string{}
	var errs []error
	for i := range nps {
		k := nps[i].Namespace + "/" + nps[i].Name
		origin := nps[i].Annotations[enforce.AnnotationOrigin]
		if part := nps[i].Annotations[enforce.AnnotationPart]; part != "" {
			origin += " (part " + part + ")"
		}
		if prev, dup := seen[k]; dup {
			errs = append(errs, fmt.Errorf("cluster %s: NetworkPolicy %s would be generated by both %s and %s", cluster, k, prev, origin))
			continue
		}
		seen[k] = origin
	}
	return errors.Join(errs...)
}

// marshalNetworkPolicy renders a NetworkPolicy as YAML without the empty
// creationTimestamp every zero ObjectMeta carries.
func marshalNetworkPolicy(np *networkingv1.NetworkPolicy) ([]byte, error) {
	j, err := json.Marshal(np)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return yaml.Marshal(m)
}

// renderLoader reads the input of every cluster.
type renderLoader struct {
	log  io.Writer
	errs []error
	seen map[string]string          // cluster/kind/ns/name -> file
	objs map[string]*clusterObjects // cluster -> its objects
}

// loadRenderInput reads IN and ingests it like the daemons would
// (renderpipeline.go). It returns the inventory, the sorted cluster IDs
// and what each cluster trusts of every cluster's CIDRs (the Submariner
// Cluster objects in its directory).
func loadRenderInput(in string, log io.Writer) (*enforce.Inventory, []string, map[string]enforce.Networks, error) {
	clusters, objs, trusted, err := readRenderInput(in, log)
	if err != nil {
		return nil, nil, nil, err
	}
	inv, err := ingest(clusters, objs)
	if err != nil {
		return nil, nil, nil, err
	}
	return inv, clusters, trusted, nil
}

// readRenderInput reads and checks the objects of every cluster directory
// of IN.
func readRenderInput(in string, log io.Writer) ([]string, map[string]*clusterObjects, map[string]enforce.Networks, error) {
	entries, err := os.ReadDir(in)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading input: %w", err)
	}
	l := &renderLoader{log: log, seen: map[string]string{}, objs: map[string]*clusterObjects{}}
	var clusters []string
	for _, e := range entries {
		if !e.IsDir() {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				logf(log, "warning: %s: files at the top level are ignored; put them in a cluster directory\n", filepath.Join(in, e.Name()))
			}
			continue
		}
		id := e.Name()
		if msgs := validation.IsDNS1123Label(id); len(msgs) > 0 {
			l.errs = append(l.errs, fmt.Errorf("%s: directory name is not a valid cluster ID: %s", filepath.Join(in, id), strings.Join(msgs, "; ")))
			continue
		}
		clusters = append(clusters, id)
		l.objs[id] = &clusterObjects{}
		l.loadCluster(id, filepath.Join(in, id))
	}
	if len(clusters) == 0 && len(l.errs) == 0 {
		return nil, nil, nil, fmt.Errorf("%s: no cluster subdirectories", in)
	}
	trusted := map[string]enforce.Networks{}
	for _, id := range clusters {
		n, errs := kube.SubmarinerNetworks(l.objs[id].known())
		l.errs = append(l.errs, errs...)
		trusted[id] = n
	}
	if len(l.errs) > 0 {
		return nil, nil, nil, errors.Join(l.errs...)
	}
	sort.Strings(clusters)
	return clusters, l.objs, trusted, nil
}

func (l *renderLoader) loadCluster(id, dir string) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if isKustomization(d.Name()) {
			return nil // what kubectl apply -k reads, not inventory
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			files = append(files, p)
		default:
			logf(l.log, "warning: %s: not a .yaml, .yml or .json file, ignored\n", p)
		}
		return nil
	})
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	sort.Strings(files)
	for _, f := range files {
		l.loadFile(id, f)
	}
}

func (l *renderLoader) loadFile(cluster, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			l.errs = append(l.errs, fmt.Errorf("%s: document %d: %w", file, doc, err))
			return
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		l.loadObject(cluster, fmt.Sprintf("%s: document %d", file, doc), raw)
	}
}

// kustomizeGroup is the API group of kustomize's own files.
const kustomizeGroup = "kustomize.config.k8s.io"

// isKustomization reports whether a file name is one kustomize reads as a
// kustomization (kubectl apply -k DIR): render skips such files silently.
func isKustomization(name string) bool {
	switch name {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return false
}

func strictUnmarshal(raw []byte, into any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(into)
}

func (l *renderLoader) fail(where, what string, err error) {
	l.errs = append(l.errs, fmt.Errorf("%s: %s: %w", where, what, err))
}

// unique records an object and reports a duplicate as an error.
func (l *renderLoader) unique(cluster, where, kind, ns, name string) bool {
	k := cluster + "/" + kind + "/" + ns + "/" + name
	if prev, ok := l.seen[k]; ok {
		l.errs = append(l.errs, fmt.Errorf("%s: %s %s: duplicate object in cluster %s (first defined at %s)", where, kind, objName(ns, name), cluster, prev))
		return false
	}
	l.seen[k] = where
	return true
}

func objName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func (l *renderLoader) loadObject(cluster, where string, raw []byte) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		l.fail(where, "object", fmt.Errorf("not a Kubernetes object: %w", err))
		return
	}
	if tm.Kind == "" {
		l.fail(where, "object", errors.New("missing kind"))
		return
	}
	if strings.HasSuffix(tm.Kind, "List") && tm.APIVersion == "v1" {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			l.fail(where, tm.Kind, err)
			return
		}
		for i, item := range list.Items {
			l.loadObject(cluster, fmt.Sprintf("%s: items[%d]", where, i), item)
		}
		return
	}
	if strings.HasPrefix(tm.APIVersion, kustomizeGroup+"/") {
		return // a Kustomization or Component under another file name
	}
	r, ok := renderReaders[tm.Kind]
	if !ok || (tm.APIVersion != r.apiVersion && r.foreign) {
		logf(l.log, "warning: %s: kind %s (%s) is not used by coastguard, ignored\n", where, tm.Kind, tm.APIVersion)
		return
	}
	if tm.APIVersion != r.apiVersion {
		l.fail(where, tm.Kind, fmt.Errorf("apiVersion %q not supported (want %q)", tm.APIVersion, r.apiVersion))
		return
	}
	r.read(l, cluster, where, raw)
}

func (l *renderLoader) validLabels(where, what string, lbls map[string]string) bool {
	for k, v := range lbls {
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(msgs) > 0 {
			l.fail(where, what, fmt.Errorf("metadata.labels[%s]: %s", k, strings.Join(msgs, "; ")))
			return false
		}
	}
	return true
}
