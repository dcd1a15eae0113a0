package v1

import (
	"fmt"
	"sort"

	sigsjson "sigs.k8s.io/json"
)

// DecodeSpec decodes the JSON of a MultiClusterNetworkPolicySpec as an
// origin's apiserver stored it, and returns the paths of the fields this
// build does not know (a newer origin's CRD admits them). Such a spec
// cannot be enforced as written: an unknown field may narrow what the
// policy admits, and ignoring it would admit more (fail open). The caller
// isolates the policy's pods instead (enforce.Policy.Unknown). Decoding is
// case-sensitive, as the apiserver's own is.
func DecodeSpec(raw []byte) (MultiClusterNetworkPolicySpec, []string, error) {
	var spec MultiClusterNetworkPolicySpec
	strict, err := sigsjson.UnmarshalStrict(raw, &spec, sigsjson.DisallowUnknownFields)
	if err != nil {
		return MultiClusterNetworkPolicySpec{}, nil, err
	}
	var unknown []string
	for _, e := range strict {
		if fe, ok := e.(sigsjson.FieldError); ok {
			unknown = append(unknown, fe.FieldPath())
		} else {
			unknown = append(unknown, fmt.Sprint(e))
		}
	}
	sort.Strings(unknown)
	return spec, unknown, nil
}
