// Package deploy holds coastguard's kustomize manifests. Its tests check the
// documentation against them (docs/OPERATIONS.md's RBAC table).
package deploy
