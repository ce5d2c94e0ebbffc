// The "live" panel of the page at `/` (see context.js): placeholder until its module is written.
export function mount(root, page) {
  void root;
  void page;
}
