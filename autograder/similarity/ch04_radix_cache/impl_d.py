# %% child_key
def child_key(self, key, offset=0):
    size = self.page_size
    if size > 1:
        return tuple(key)[offset:offset + size]
    return key[offset]
# %% match_len
def _match_len(self, edge, key, offset):
    tail = key[offset:]
    i = 0
    stop = min(len(edge), len(tail))
    while i < stop:
        if edge[i] != tail[i]:
            break
        i += 1
    page = self.page_size
    return i - (i % page)
# %% split_node
def _split_node(self, child, split_len):
    grand = child.parent
    slot = self.child_key(child.key)
    upper = self._new_node(
        key=child.key[:split_len],
        value=child.value[:split_len],
        parent=grand,
        lock_ref=child.lock_ref,
    )
    grand.children[slot] = upper
    remaining_key = child.key[split_len:]
    remaining_value = child.value[split_len:]
    child.key = remaining_key
    child.value = remaining_value
    child.parent = upper
    upper.children[self.child_key(remaining_key)] = child
    return upper
# %% match_prefix
def match_prefix(self, key):
    aligned = self._page_aligned(tuple(key))
    root = self.root_node
    if len(aligned) == 0:
        return [], root
    when = self._tick()
    root.last_access_time = when
    node = root
    offset = 0
    indices = []
    done = False
    while not done and offset < len(aligned):
        nxt = node.children.get(self.child_key(aligned, offset), None)
        if nxt is None:
            done = True
            continue
        nxt.last_access_time = when
        matched = self._match_len(nxt.key, aligned, offset)
        partial = matched < len(nxt.key)
        if partial:
            nxt = self._split_node(nxt, matched)
            done = True
        indices.extend(nxt.value)
        node = nxt
        offset += matched
    return indices, node
# %% insert
def insert(self, key, value):
    if len(list(value)) != len(list(key)):
        raise ValueError("len(value) must equal len(key)")
    aligned = self._page_aligned(tuple(key))
    vals = tuple(value)[:len(aligned)]
    when = self._tick()
    self.root_node.last_access_time = when
    node, offset, partial = self.root_node, 0, None
    # follow whole edges; a key that leaves an edge midway ends the walk there
    while offset < len(aligned) and partial is None:
        nxt = node.children.get(self.child_key(aligned, offset), None)
        if nxt is None:
            break
        nxt.last_access_time = when
        matched = self._match_len(nxt.key, aligned, offset)
        offset += matched
        if matched == len(nxt.key):
            node = nxt
        else:
            partial = (nxt, matched)
    if partial is not None:
        node = self._split_node(*partial)
    already = offset
    if already < len(aligned):
        leaf = self._new_node(key=aligned[already:], value=vals[already:], parent=node)
        node.children[self.child_key(aligned, already)] = leaf
        self.evictable_size_ = self.evictable_size_ + (len(aligned) - already)
        self._update_leaf_status(node)
        self._update_leaf_status(leaf)
    return already
