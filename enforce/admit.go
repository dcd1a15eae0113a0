package enforce

// Admission is what the enforcing cluster applies to every MCNP's result
// before anything is generated: its guard rails (protected namespaces and
// caps, which also set the evaluation budget) and its consent to other
// clusters' MCNPs. The daemon, `coastguardd render` and the kubectl plugin
// all go through Admit, so that they cannot disagree on what a cluster
// enforces.
type Admission struct {
	Guards Guards
	// Consent: nil admits every other cluster's MCNP outside protected
	// namespaces.
	Consent *Consent
}

// Admit evaluates policy ref for the enforcing cluster self within the
// guards' budget, then applies the guard rails and the consent. The
// inventory's pinned labels (Inventory.SetPinnedLabels) must already be the
// consent's ClusterLabels, as they affect every clusterSelector.
func Admit(self string, inv *Inventory, ref PolicyRef, a Admission) Result {
	res := ApplyGuards(self, ref, EvaluateBudget(self, inv, ref, a.Guards.Budget()), a.Guards)
	return ApplyConsent(self, ref, res, a.Consent, inv)
}
