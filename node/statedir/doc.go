// Package statedir checks, before the node reads them, that nobody but
// the user the node runs as (or root) can change its state dir and the
// files in it that say who the node is, whom it obeys and what it has
// spent: the node key, the ownership certificate, the steward's journal
// and its checkpoint, the owner's config, the grant revocations, and the
// config files. Another user who can write any of them can take the node
// over or roll back its spend, so the node refuses to start and says
// which chmod or chown puts it right.
package statedir
