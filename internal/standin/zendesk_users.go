package standin

import (
	"net/http"
	"strconv"
	"strings"
)

// showManyUsers serves GET /api/v2/users/show_many.json?ids=1,2,3: up to
// 100 users by ID, each with its role. A user the stand-in does not know
// is left out, as Zendesk leaves out IDs it has no user for.
// https://developer.zendesk.com/api-reference/ticketing/users/users/#show-many-users
func (z *Zendesk) showManyUsers(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("ids")
	parts := strings.Split(raw, ",")
	if raw == "" || len(parts) > 100 {
		writeBadRequest(w, "ids must list 1 to 100 user ids")
		return
	}
	ids := make([]int64, 0, len(parts))
	for _, p := range parts {
		id, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || id <= 0 {
			writeBadRequest(w, "ids must list 1 to 100 user ids")
			return
		}
		ids = append(ids, id)
	}
	z.mu.Lock()
	users := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		u, ok := z.knownUserLocked(id)
		if !ok {
			continue
		}
		users = append(users, map[string]any{"id": u.ID, "name": u.Name, "role": u.Role, "active": true})
	}
	z.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"users": users, "next_page": nil, "previous_page": nil, "count": len(users)})
}

// knownUserLocked is a user the account has: a seeded one, the API user,
// a ticket's requester, or the author of a comment or audit. z.mu must be
// held.
func (z *Zendesk) knownUserLocked(id int64) (User, bool) {
	if u, ok := z.users[id]; ok {
		return u, true
	}
	if id == ZendeskAgentID {
		return User{ID: id, Name: "Support Agent", Role: RoleAdmin}, true
	}
	for _, zt := range z.tickets {
		if zt.RequesterID == id {
			return User{ID: id, Name: zt.RequesterName, Role: RoleEndUser}, true
		}
		for _, c := range zt.comments {
			if c.authorID == id {
				return z.userLocked(zt, id), true
			}
		}
	}
	return User{}, false
}
