// Package githubaction will hold a GitHub Action that previews Pulumi changes on
// pull requests and comments the result. Not yet implemented.
package githubaction
