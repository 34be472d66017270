//! The `peapod` program's code in the order of `text-order.txt` (scripts/text-order): the
//! daemon's run code packed together, and its relocations packed; see peapod_link_order.
fn main() {
    peapod_link_order::link_in_order("peapod", "text-order.txt");
    peapod_link_order::pack_relative_relocations("peapod");
}
