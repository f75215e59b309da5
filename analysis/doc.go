// Package analysis will hold an HTTP service answering "did stack X update
// successfully at commit Y?" for Argo Rollouts AnalysisTemplates and Kargo http
// steps. Not yet implemented.
package analysis
