// Package apitype holds Corral's wire types: the resources, session events, identifiers, enums and the error
// envelope of the Managed Agents API. It imports only the standard library, so every other package may use it.
package apitype
