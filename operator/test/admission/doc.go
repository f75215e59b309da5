// Package admission tests the CRDs against a real kube-apiserver: the manifests
// PKO v2 users write are accepted unchanged and lose nothing, and each
// admission-time (CEL) rule rejects bad input with its readable message.
package admission
